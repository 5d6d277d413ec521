#version 450
// A dispatch that spins until the host sets `stop` (host-visible, coherent), for the black box's tests.
// llvmpipe ends any loop after 65535 iterations (its loop limiter; a loop inside another did not lengthen the spin:
// the outer one stopped after 2 rounds), so the spin is 32 loops one after another, each reading the flag 16 times
// per iteration, in 256 invocations: bounded (a failing test still ends) and long on lavapipe (9.4 s on a 2-core
// machine, where one invocation spun for 0.1 s, shorter than the black box's tests wait) and on a GPU. Only
// invocations given `spin != 0` spin; `rounds` counts the loops the first invocation began, written as it goes.
layout(local_size_x = 256) in;
layout(set = 0, binding = 0) coherent volatile buffer Flag { uint stop; uint rounds; } flag;
layout(push_constant) uniform P { uint spin; } p;

#define READ4 s |= atomicAdd(flag.stop, 0u); s |= atomicAdd(flag.stop, 0u); s |= atomicAdd(flag.stop, 0u); s |= atomicAdd(flag.stop, 0u);
#define LOOP if (gl_LocalInvocationIndex == 0u) flag.rounds += 1u; for (uint i = 0u; i < 65000u && s == 0u; i++) { READ4 READ4 READ4 READ4 } if (s != 0u) return;
#define LOOP8 LOOP LOOP LOOP LOOP LOOP LOOP LOOP LOOP

void main() {
    if (p.spin == 0u) {
        return;
    }
    uint s = 0u;
    LOOP8 LOOP8 LOOP8 LOOP8
}

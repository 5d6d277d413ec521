#version 450
// The cheapest compute shader: the benchmark measures the host side of recording and submitting dispatches.
layout(local_size_x = 1) in;
layout(push_constant) uniform P { uint x; } p;
void main() {}

//! What a line says about the runtime's setup: GPUs and their properties, the offload, buffers, flash attention and
//! the compute graph.

use crate::event::{BufferKind, EventKind, GpuDevice, VulkanDevice};

use super::text::{after, find, leading_f64, leading_u32, leading_u64, trim, trim_start, yes_no};
use super::trace::call_paren;

/// The first `gfx…` token of a text.
pub(super) fn gfx_token(s: &[u8]) -> Option<&[u8]> {
    let start = find(s, b"gfx")?;
    let t = &s[start..];
    let end = t
        .iter()
        .position(|b| !(b.is_ascii_alphanumeric() || *b == b':' || *b == b'-' || *b == b'+'))
        .unwrap_or(t.len());
    Some(&t[..end])
}

/// `offloaded N/M layers to GPU` anywhere in a message.
pub(super) fn offloaded(s: &[u8]) -> Option<(u32, u32)> {
    let rest = after(s, b"offloaded ")?;
    let (n, rest) = leading_u32(rest)?;
    let (m, rest) = leading_u32(rest.strip_prefix(b"/")?)?;
    rest.starts_with(b" layers").then_some((n, m))
}

/// `  Device 0: NAME, gfx900:xnack- (0x900), VMM: no, Wave Size: 64[, VRAM: N MiB][, ID: x]` (ROCm) or
/// `  Device 0: NAME, compute capability 8.6, VMM: yes[, VRAM: N MiB][, ID: x]` (CUDA).
pub(super) fn gpu_device(rest: &[u8]) -> Option<GpuDevice<'_>> {
    let (index, rest) = leading_u32(rest)?;
    let rest = rest.strip_prefix(b": ")?;
    // The name may itself contain ", " (rare); the fields are found from their labels instead.
    let vmm_at = find(rest, b", VMM: ")?;
    let head = &rest[..vmm_at];
    let mut dev = GpuDevice { index, ..GpuDevice::default() };
    if let Some(cc_at) = find(head, b", compute capability ") {
        dev.name = &head[..cc_at];
        dev.compute_capability = Some(trim(&head[cc_at + 21..]));
    } else if let Some(comma) = head.iter().rposition(|&b| b == b',') {
        dev.name = &head[..comma];
        let arch = trim(&head[comma + 1..]);
        let arch_end = arch.iter().position(|&b| b == b' ').unwrap_or(arch.len());
        dev.arch = Some(&arch[..arch_end]);
    } else {
        dev.name = head;
    }
    for field in rest[vmm_at + 2..].split(|&b| b == b',').map(trim) {
        if let Some(v) = field.strip_prefix(b"VMM: ") {
            dev.vmm = yes_no(v);
        } else if let Some(v) = field.strip_prefix(b"Wave Size: ") {
            dev.wave_size = leading_u32(v).map(|x| x.0);
        } else if let Some(v) = field.strip_prefix(b"VRAM: ") {
            dev.vram_mib = leading_u64(v).map(|x| x.0);
        } else if let Some(v) = field.strip_prefix(b"ID: ") {
            dev.id = Some(v);
        }
    }
    Some(dev)
}

/// Ollama's Windows Vulkan memory probe names the GPU it reads: `Discrete GPU (AMD Radeon RX 6650 XT) with LUID 0x…
/// detected. Dedicated Total: 8515719168.00 bytes (7.93 GB), …` (its DXGI + PDH reporting in ggml-vulkan).
pub(super) fn dxgi_discrete_gpu(msg: &[u8]) -> Option<EventKind<'_>> {
    let rest = msg.strip_prefix(b"Discrete GPU (")?;
    let end = find(rest, b") with LUID ")?;
    let total_mib = after(rest, b"Dedicated Total: ").and_then(leading_u64).map(|(bytes, _)| bytes / (1024 * 1024));
    Some(EventKind::DeviceListed { device: b"Vulkan", description: &rest[..end], total_mib, free_mib: None })
}

/// `Vulkan0 : llvmpipe (LLVM 15.0.6, 256 bits) (2048 MiB, 2048 MiB free)` (device_info) or
/// `CUDA0: NAME (T MiB, F MiB free)` (`--list-devices`).
pub(super) fn device_listed(s: &[u8]) -> Option<EventKind<'_>> {
    let s = trim(s);
    if !s.ends_with(b" MiB free)") {
        return None;
    }
    let colon = s.iter().position(|&b| b == b':')?;
    let device = trim(&s[..colon]);
    if device.is_empty() || device.contains(&b' ') {
        return None;
    }
    let rest = trim(&s[colon + 1..]);
    let open = call_paren(rest)?;
    let sizes = &rest[open + 1..rest.len() - 1];
    let total_mib = leading_u64(trim(sizes)).map(|x| x.0);
    let free_mib = after(sizes, b", ").and_then(|f| leading_u64(trim(f))).map(|x| x.0);
    Some(EventKind::DeviceListed { device, description: trim(&rest[..open]), total_mib, free_mib })
}

/// A model path after ` from `: up to ` (version` when present.
pub(super) fn model_path(s: &[u8]) -> &[u8] {
    let end = find(s, b" (version").unwrap_or(s.len());
    trim(&s[..end])
}

/// `ggml_vulkan: Found N Vulkan devices:`, `ggml_vulkan: N = NAME (DRIVER) | uma: 0 | …`, device loss.
pub(super) fn vulkan_line(text: &[u8]) -> Option<EventKind<'_>> {
    if let Some(rest) = text.strip_prefix(b"Found ") {
        let (count, _) = leading_u32(rest)?;
        return Some(EventKind::DevicesFound { backend: b"Vulkan", count });
    }
    if text.starts_with(b"No devices found") {
        return Some(EventKind::DevicesFound { backend: b"Vulkan", count: 0 });
    }
    if let Some((index, rest)) = leading_u32(text) {
        if let Some(rest) = rest.strip_prefix(b" = ") {
            return Some(EventKind::VulkanDevice(vulkan_device(index, rest)));
        }
    }
    if find(text, b"device lost").is_some() || find(text, b"DeviceLost").is_some() {
        return Some(EventKind::DeviceLost { message: text });
    }
    if find(text, b"allocation").is_some() && find(text, b"failed").is_some() {
        return Some(EventKind::OutOfMemory { message: text });
    }
    None
}

pub(super) fn vulkan_device(index: u32, rest: &[u8]) -> VulkanDevice<'_> {
    let mut fields = rest.split(|&b| b == b'|').map(trim);
    let head = fields.next().unwrap_or_default();
    let mut dev = VulkanDevice { index, ..VulkanDevice::default() };
    // `NAME (DRIVER)`: the driver is the last parenthesised group (names have their own parentheses).
    match (head.ends_with(b")"), call_paren(head)) {
        (true, Some(open)) if open > 0 => {
            dev.name = trim(&head[..open]);
            dev.driver = Some(&head[open + 1..head.len() - 1]);
        }
        _ => dev.name = head,
    }
    for field in fields {
        let Some(colon) = find(field, b": ") else { continue };
        let (key, value) = (&field[..colon], trim(&field[colon + 2..]));
        match key {
            b"uma" => dev.uma = yes_no(value),
            b"fp16" => dev.fp16 = yes_no(value),
            b"bf16" => dev.bf16 = yes_no(value),
            b"warp size" => dev.warp_size = leading_u32(value).map(|x| x.0),
            b"shared memory" => dev.shared_memory = leading_u64(value).map(|x| x.0),
            b"int dot" => dev.int_dot = yes_no(value),
            b"matrix cores" => dev.matrix_cores = Some(value),
            _ => {}
        }
    }
    dev
}

/// `CUDA0 (NVIDIA GeForce RTX 3090) (0000:01:00.0) - 23877 MiB free` after `using device `.
pub(super) fn device_used(rest: &[u8]) -> Option<EventKind<'_>> {
    let end = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
    let device = &rest[..end];
    let tail = &rest[end..];
    let (description, free_mib) = match find(tail, b" - ") {
        Some(dash) => (trim(&tail[..dash]), leading_u64(trim_start(&tail[dash + 3..])).map(|x| x.0)),
        None => (trim(tail), None),
    };
    Some(EventKind::DeviceUsed { device, description, free_mib })
}

/// `   CUDA0 model buffer size =  4403.50 MiB`, `CUDA0 KV buffer size`, `CUDA0 compute buffer size`,
/// `CUDA_Host  output buffer size`, older `CUDA0 buffer size` (model weights).
pub(super) fn buffer_size(text: &[u8]) -> Option<EventKind<'_>> {
    let at = find(text, b"buffer size = ").or_else(|| find(text, b"buffer size ="))?;
    let head = trim(&text[..at]);
    let value = trim_start(&text[at + 13..]);
    let value = trim_start(value.strip_prefix(b"=").unwrap_or(value));
    let (mib, unit) = leading_f64(value)?;
    let mib = match trim(unit) {
        b"MiB" | b"MB" => mib,
        b"GiB" => mib * 1024.0,
        b"KiB" => mib / 1024.0,
        _ => return None,
    };
    let (device, buffer) = match head.iter().rposition(|&b| b == b' ') {
        Some(sp) => {
            let word = &head[sp + 1..];
            let buffer = match word {
                b"model" => BufferKind::Model,
                b"KV" | b"kv" => BufferKind::Kv,
                b"compute" => BufferKind::Compute,
                b"output" => BufferKind::Output,
                _ => return Some(EventKind::BufferSize { device: head, buffer: BufferKind::Model, mib }),
            };
            (trim(&head[..sp]), buffer)
        }
        None => (head, BufferKind::Model),
    };
    if device.is_empty() || device.contains(&b' ') {
        return None;
    }
    Some(EventKind::BufferSize { device, buffer, mib })
}

/// `flash_attn = auto`, `Flash Attention was auto, set to enabled`, `Flash Attention enabled`,
/// `Flash Attention not supported, set to disabled`.
pub(super) fn flash_attention(text: &[u8]) -> Option<EventKind<'_>> {
    let t = trim_start(text);
    if let Some(rest) = t.strip_prefix(b"flash_attn") {
        let value = trim(trim_start(rest).strip_prefix(b"=")?);
        return Some(EventKind::FlashAttention { setting: value });
    }
    let rest = t.strip_prefix(b"Flash Attention ")?;
    let setting = match after(rest, b"set to ") {
        Some(v) => trim(v),
        None => trim(rest),
    };
    Some(EventKind::FlashAttention { setting })
}

/// `graph nodes  = 1030`, `graph splits = 2 (with bs=512), 1 (with bs=1)`, `graph: nodes = 1030,
/// splits = 2, …`, `graph (pp bs=512, tg bs=1): nodes = 1030 / 1030, splits = 2 / 2`.
pub(super) fn graph(text: &[u8]) -> Option<EventKind<'_>> {
    let t = trim_start(text);
    let rest = t.strip_prefix(b"graph")?;
    let number_after = |key: &[u8]| -> Option<u64> {
        let r = after(rest, key)?;
        let r = trim_start(r);
        let r = trim_start(r.strip_prefix(b"=")?);
        leading_u64(r).map(|x| x.0)
    };
    let nodes = number_after(b"nodes");
    let splits = number_after(b"splits");
    (nodes.is_some() || splits.is_some()).then_some(EventKind::Graph { nodes, splits })
}

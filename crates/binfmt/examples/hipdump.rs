//! Print a summary of every offload bundle in an ELF's `.hip_fatbin`: `cargo run --example hipdump FILE`.
use binfmt::amdgpu::code_object::CodeObject;
use binfmt::bundle::{self, FatbinItem};
use binfmt::elf::HostElf;
use binfmt::Limits;

fn main() {
    let path = std::env::args().nth(1).expect("usage: hipdump FILE");
    let data = std::fs::read(&path).expect("read");
    let t = std::time::Instant::now();
    let elf = HostElf::parse(&data).expect("elf");
    let Some(sec) = elf.section(".hip_fatbin") else {
        println!("no .hip_fatbin");
        return;
    };
    let (mut bundles, mut cos, mut kernels) = (0, 0, 0);
    let mut per_target = std::collections::BTreeMap::<String, usize>::new();
    for item in bundle::walk(sec.data) {
        let item = match item {
            Ok(i) => i,
            Err(e) => {
                println!("error: {e}");
                continue;
            }
        };
        bundles += 1;
        let owned;
        let b = match &item.item {
            FatbinItem::Bundle(b) => b.clone(),
            FatbinItem::Compressed(c) => {
                owned = c.decompress(&Limits::default()).expect("decompress");
                bundle::Bundle::parse(&owned).expect("inner")
            }
        };
        for e in b.device_entries() {
            cos += 1;
            let co = CodeObject::parse(e.data).expect("co");
            let m = co.metadata().expect("meta").unwrap_or_default();
            kernels += m.kernels.len();
            *per_target.entry(format!("{} <- {}", co.target_id(), e.id.raw)).or_default() += m.kernels.len();
        }
    }
    println!("{bundles} bundles, {cos} code objects, {kernels} kernels in {:?}", t.elapsed());
    for (k, v) in per_target {
        println!("  {k}: {v}");
    }
}

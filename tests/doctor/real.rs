//! `backscope doctor` on this machine (no GPU; what it reports is checked against the files and tools here) and on
//! a fake sysfs/proc/dev/etc tree built from the formats of the real files (the kernel's sysfs attributes, KFD
//! topology properties, /proc/driver/nvidia as quoted in public issues, Debian's Vulkan manifests, the unit file
//! Ollama's installer writes), with the real cyllama-rocm libggml-hip and Debian's rocBLAS as the installed
//! runtime.

use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::Value;

use crate::support::util::*;

fn claims_with<'a>(r: &'a Value, prefix: &str) -> Vec<&'a Value> {
    r["claims"].as_array().unwrap().iter().filter(|c| c["id"].as_str().unwrap().starts_with(prefix)).collect()
}

fn nodes_in(dir: &str, prefixes: &[&str]) -> usize {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| {
                    let n = e.file_name().into_string().unwrap_or_default();
                    prefixes.iter().any(|p| {
                        n.strip_prefix(p).is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
                    })
                })
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn on_this_machine_no_gpu_is_found_quickly_and_nothing_false_is_claimed() {
    let started = Instant::now();
    let out = stdout_ok(backscope().args(["doctor", "--json"]));
    let wall = started.elapsed();
    let r: Value = serde_json::from_str(&out).unwrap();
    // A hang guard, not a speed test (speed is measured in benchmarks, not asserted in tests): with no GPU nothing
    // should wait on a driver, yet a loaded 2-core machine can stretch the helper tools well past a second.
    assert!(wall.as_secs() < 30, "doctor took {wall:?} (its own measure: {} ms)", r["elapsed_ms"]);

    // What the kernel shows here, read independently: DRM card/render nodes, KFD GPU nodes, NVIDIA's proc files.
    let drm = nodes_in("/sys/class/drm", &["card", "renderD"]);
    let nvidia = Path::new("/proc/driver/nvidia/gpus").exists();
    let kfd_gpu = std::fs::read_dir("/sys/class/kfd/kfd/topology/nodes").into_iter().flatten().flatten().any(|n| {
        std::fs::read_to_string(n.path().join("properties"))
            .unwrap_or_default()
            .lines()
            .any(|l| l.starts_with("gfx_target_version ") && l.trim_end() != "gfx_target_version 0")
    });
    let gpus = r["gpus"]["gpus"].as_array().unwrap();
    assert_eq!(gpus.is_empty(), drm == 0 && !nvidia && !kfd_gpu, "{gpus:#?}");
    assert!(gpus.is_empty(), "this test machine has no GPU");
    let none = claims_with(&r, "doctor.gpu.none");
    assert_eq!(none.len(), 1);
    let cited: Vec<&str> = none[0]["sources"].as_array().unwrap().iter().map(|s| s["path"].as_str().unwrap()).collect();
    assert_eq!(cited, ["/sys/class/drm", "/sys/class/kfd/kfd/topology/nodes", "/proc/driver/nvidia/gpus"]);
    assert!(r["gates"].as_array().unwrap().is_empty());
    assert!(stdout_ok(backscope().arg("doctor")).contains("no GPU to judge"));

    // No device node is claimed that does not exist, and none that exists is missed.
    let dev_nodes =
        Path::new("/dev/kfd").exists() as usize + nodes_in("/dev/dri", &["renderD"]) + nodes_in("/dev", &["nvidia"]);
    assert_eq!(claims_with(&r, "doctor.access.no-nodes").len(), (dev_nodes == 0) as usize);

    // A Vulkan device of CPU type (lavapipe here) is named as such, never as a GPU.
    if let Ok(vk) = Command::new("vulkaninfo").arg("--summary").output() {
        let text = String::from_utf8_lossy(&vk.stdout);
        let claim = claims_with(&r, "doctor.tool.vulkaninfo");
        assert_eq!(claim.len(), 1);
        let st = claim[0]["statement"].as_str().unwrap();
        assert_eq!(text.contains("PHYSICAL_DEVICE_TYPE_CPU"), st.contains("a CPU implementation, not a GPU"), "{st}");
        assert_eq!(claim[0]["sources"][0]["kind"], "command");
    }
    // rocminfo, when installed, is run and cited; without a GPU it lists no agent.
    if Path::new("/usr/bin/rocminfo").exists() {
        let c = claims_with(&r, "doctor.tool.rocminfo");
        assert_eq!(c.len(), 1);
        assert!(c[0]["statement"].as_str().unwrap().starts_with("rocminfo lists no GPU agent"), "{:#}", c[0]);
    }
    // Every claim carries a source.
    for c in r["claims"].as_array().unwrap() {
        assert!(!c["sources"].as_array().unwrap().is_empty(), "claim without a source: {c:#}");
    }
}

fn write(root: &Path, rel: &str, text: &str) -> PathBuf {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, text).unwrap();
    p
}

fn node(root: &Path, rel: &str, mode: u32) {
    let p = write(root, rel, "");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A machine with an MI50-class AMD GPU (gfx906) and an NVIDIA H100, Ollama installed as a service running as
/// `ollama`, and the user `alice` outside the render group.
fn fake_host(root: &Path) {
    // PCI devices and their DRM nodes (sysfs: /sys/class/drm/<node>/device → the PCI device; `vendor`, `device`
    // and `uevent` attributes as the kernel writes them).
    let amd = write(root, "sys/devices/pci0000:00/0000:03:00.0/vendor", "0x1002\n").parent().unwrap().to_path_buf();
    write(root, "sys/devices/pci0000:00/0000:03:00.0/device", "0x66a1\n");
    write(root, "sys/devices/pci0000:00/0000:03:00.0/uevent", "DRIVER=amdgpu\nPCI_CLASS=38000\nPCI_ID=1002:66A1\nPCI_SUBSYS_ID=1002:0834\nPCI_SLOT_NAME=0000:03:00.0\nMODALIAS=pci:v00001002d000066A1sv00001002sd00000834bc03sc80i00\n");
    let nv = write(root, "sys/devices/pci0000:00/0000:01:00.0/vendor", "0x10de\n").parent().unwrap().to_path_buf();
    write(root, "sys/devices/pci0000:00/0000:01:00.0/device", "0x2330\n");
    write(
        root,
        "sys/devices/pci0000:00/0000:01:00.0/uevent",
        "DRIVER=nvidia\nPCI_CLASS=30200\nPCI_ID=10DE:2330\nPCI_SLOT_NAME=0000:01:00.0\n",
    );
    for (n, dev) in [("card0", &amd), ("renderD128", &amd), ("card1", &nv), ("renderD129", &nv)] {
        std::fs::create_dir_all(root.join("sys/class/drm").join(n)).unwrap();
        symlink(dev, root.join("sys/class/drm").join(n).join("device")).unwrap();
    }
    std::fs::create_dir_all(root.join("sys/class/drm/card0-DP-1")).unwrap();
    // KFD topology: node 0 the CPU (gfx_target_version 0), node 1 the GPU (`key value` lines, kfd_topology.c).
    write(root, "sys/class/kfd/kfd/topology/nodes/0/properties", "cpu_cores_count 16\nsimd_count 0\nmem_banks_count 1\ncaches_count 0\nio_links_count 1\ngfx_target_version 0\nvendor_id 0\ndevice_id 0\nlocation_id 0\ndrm_render_minor 0\n");
    write(root, "sys/class/kfd/kfd/topology/nodes/1/properties", "cpu_cores_count 0\nsimd_count 240\nmem_banks_count 1\ncaches_count 93\nio_links_count 1\nmax_waves_per_simd 10\nwave_front_size 64\nsimd_per_cu 4\ngfx_target_version 90006\nvendor_id 4098\ndevice_id 26273\nlocation_id 768\ndomain 0\ndrm_render_minor 128\n");
    // /proc/driver/nvidia as the driver writes it (key, colon, tabs; kata-containers/runtime#2546 and
    // dylanaraps/neofetch#876 quote these files).
    write(root, "proc/driver/nvidia/gpus/0000:01:00.0/information", "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 174\nGPU UUID: \t GPU-0c4a4d41-7e4f-5b7a-1c2d-3e4f5a6b7c8d\nVideo BIOS: \t 96.00.89.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t 0000:01:00.0\nDevice Minor: \t 0\nGPU Excluded:\t No\n");
    write(root, "proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  384.98  Thu Oct 26 15:16:01 PDT 2017\nGCC version:  gcc version 7.2.0 (Ubuntu 7.2.0-8ubuntu3) \n");
    // /proc/modules: name size refcount deps state offset (proc(5)).
    write(root, "proc/modules", "amdgpu 15269888 2 - Live 0x0000000000000000\nnvidia_uvm 1540096 0 - Live 0x0000000000000000 (POE)\nnvidia 56819712 1 nvidia_uvm, Live 0x0000000000000000 (POE)\n");
    // Device nodes: ROCm's owned by the render group (0660), NVIDIA's world-accessible (0666) as its driver makes them.
    node(root, "dev/kfd", 0o660);
    node(root, "dev/dri/card0", 0o660);
    node(root, "dev/dri/renderD128", 0o660);
    node(root, "dev/dri/renderD129", 0o660);
    node(root, "dev/nvidiactl", 0o666);
    node(root, "dev/nvidia0", 0o666);
    node(root, "dev/nvidia-uvm", 0o666);
    // The owning group is the gid the test's files got; call it `render` and put `ollama` in it.
    let gid = std::fs::metadata(root.join("dev/kfd")).unwrap().gid();
    write(root, "etc/passwd", "root:x:0:0:root:/root:/bin/bash\nollama:x:995:995::/usr/share/ollama:/bin/false\nalice:x:1000:1000:Alice:/home/alice:/bin/bash\n");
    write(root, "etc/group", &format!("render:x:{gid}:ollama\nollama:x:995:\nalice:x:1000:\n"));
    // ollama.service as Ollama's install.sh writes it, plus a drop-in with an override (docs/faq: systemctl edit).
    write(root, "etc/systemd/system/ollama.service", "[Unit]\nDescription=Ollama Service\nAfter=network-online.target\n\n[Service]\nExecStart=/usr/local/bin/ollama serve\nUser=ollama\nGroup=ollama\nRestart=always\nRestartSec=3\nEnvironment=\"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\"\n\n[Install]\nWantedBy=default.target\n");
    write(
        root,
        "etc/systemd/system/ollama.service.d/override.conf",
        "[Service]\nEnvironment=\"HSA_OVERRIDE_GFX_VERSION=9.0.6\"\n",
    );
    // Vulkan: this machine's Mesa manifests, and a Steam-overlay-style implicit layer that is always on.
    for (from, to) in [
        ("/usr/share/vulkan/icd.d/radeon_icd.x86_64.json", "usr/share/vulkan/icd.d/radeon_icd.x86_64.json"),
        (
            "/usr/share/vulkan/implicit_layer.d/VkLayer_MESA_device_select.json",
            "usr/share/vulkan/implicit_layer.d/VkLayer_MESA_device_select.json",
        ),
    ] {
        write(root, to, &std::fs::read_to_string(from).unwrap_or_else(|e| panic!("{from}: {e} (mesa-vulkan-drivers)")));
    }
    write(
        root,
        "home/alice/.local/share/vulkan/implicit_layer.d/steamoverlay_x86_64.json",
        r#"{
  "file_format_version" : "1.0.0",
  "layer" : {
    "name": "VK_LAYER_VALVE_steam_overlay_64",
    "type": "GLOBAL",
    "library_path": "/home/alice/.local/share/Steam/ubuntu12_64/steamoverlayvulkanlayer.so",
    "api_version": "1.3.207",
    "implementation_version": "1",
    "description": "Steam Overlay Layer",
    "disable_environment": {
      "DISABLE_VK_LAYER_VALVE_steam_overlay_1": "1"
    }
  }
}
"#,
    );
    // Ollama's lib dir: the real ROCm build of libggml-hip (cyllama-rocm, gfx1100/gfx90a/gfx942) and Debian's
    // rocBLAS library files.
    std::fs::create_dir_all(root.join("usr/lib/ollama/rocm/rocblas/library")).unwrap();
    symlink(cyllama_hip(), root.join("usr/lib/ollama/rocm/libggml-hip.so")).unwrap();
    let lib = fixture("librocblas0/usr/lib/x86_64-linux-gnu/rocblas/2.47.0/library");
    for e in std::fs::read_dir(&lib).unwrap().flatten() {
        symlink(e.path(), root.join("usr/lib/ollama/rocm/rocblas/library").join(e.file_name())).unwrap();
    }
}

#[test]
fn on_a_fake_host_it_finds_both_gpus_their_access_overrides_and_gate_verdicts() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    fake_host(root);
    let mut cmd = backscope();
    cmd.args(["doctor", "--json", "--user", "alice", "--root"]).arg(root);
    // HOME is a path of the fake host: the Vulkan loader's per-user directories are under it.
    cmd.env_clear().env("HOME", "/home/alice").env("HSA_OVERRIDE_GFX_VERSION", "10.3.0").env("OLLAMA_DEBUG", "1");
    let r: Value = serde_json::from_str(&stdout_ok(&mut cmd)).unwrap();
    let at = |rel: &str| root.join(rel).display().to_string();

    // GPUs: the AMD card from DRM + KFD, the NVIDIA one from DRM + /proc; connectors are not devices.
    let gpus = r["gpus"]["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 2, "{gpus:#?}");
    let amd = gpus.iter().find(|g| g["vendor"] == "amd").unwrap();
    assert_eq!((amd["gfx_target"].as_str(), amd["gfx_target_version"].as_u64()), (Some("gfx906"), Some(90006)));
    assert_eq!(
        (amd["slot"].as_str(), amd["driver"].as_str(), amd["kfd_node"].as_str()),
        (Some("0000:03:00.0"), Some("amdgpu"), Some("1"))
    );
    assert_eq!(amd["nodes"], serde_json::json!(["card0", "renderD128"]));
    assert_eq!(amd["pci_id"], serde_json::json!(["0x1002", "0x66a1"]));
    let nv = gpus.iter().find(|g| g["vendor"] == "nvidia").unwrap();
    assert_eq!((nv["model"].as_str(), nv["slot"].as_str()), (Some("NVIDIA H100 80GB HBM3"), Some("0000:01:00.0")));
    assert_eq!(r["gpus"]["nvidia_driver"], "384.98");
    assert!(claims_with(&r, "doctor.gpu.none").is_empty());
    let kfd_claim = claims_with(&r, "doctor.gpu.0000:03:00.0");
    assert!(kfd_claim[0]["sources"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["path"] == at("sys/class/kfd/kfd/topology/nodes/1/properties")));
    assert_eq!((r["modules"]["amdgpu"].as_bool(), r["modules"]["nvidia"].as_bool()), (Some(true), Some(true)));

    // Access: ollama (the service's User=) is in the owning group; alice is not, and 0660 leaves her out.
    let access = |user: &str, node: &str| -> bool {
        r["device_access"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["user"] == user && a["path"] == at(node))
            .unwrap_or_else(|| panic!("{user} {node}"))["read_write"]
            .as_bool()
            .unwrap()
    };
    assert!(access("ollama", "dev/kfd") && access("ollama", "dev/dri/renderD128"));
    assert!(!access("alice", "dev/kfd") && !access("alice", "dev/dri/renderD128"));
    assert!(access("alice", "dev/nvidiactl") && access("alice", "dev/nvidia0"));
    let denied = claims_with(&r, "doctor.access.alice.kfd");
    assert!(denied[0]["statement"].as_str().unwrap().contains("alice cannot open"), "{:#}", denied[0]);
    assert!(denied[0]["sources"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["path"] == at("dev/kfd") && s["what"].as_str().unwrap().starts_with("mode -rw-rw----")));

    // Overrides: the shell's 10.3.0 maps the gfx906 card onto GFX10 code (a crash risk); the service's 9.0.6 is
    // the card's own target.
    let overrides = r["overrides"].as_array().unwrap();
    let shell = overrides.iter().find(|o| o["origin"] == "process").unwrap();
    assert_eq!((shell["target"].as_str(), shell["per_gpu"][0]["risk"].as_str()), (Some("gfx1030"), Some("crash")));
    let service = overrides.iter().find(|o| o["origin"] != "process").unwrap();
    assert_eq!(service["origin"], at("etc/systemd/system/ollama.service.d/override.conf"));
    assert_eq!((service["target"].as_str(), service["per_gpu"][0]["risk"].as_str()), (Some("gfx906"), Some("none")));
    let risk = claims_with(&r, "doctor.override.HSA_OVERRIDE_GFX_VERSION.gfx906");
    assert!(risk.iter().any(|c| c["statement"].as_str().unwrap().contains("crash risk")), "{risk:#?}");
    assert_eq!(r["service"]["user"], "ollama");
    assert!(r["environment"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["name"] == "OLLAMA_DEBUG" && s["origin"] == "process"));

    // Vulkan: the Steam overlay is flagged as injected, Mesa's layer is not.
    let layers = claims_with(&r, "doctor.vulkan.layer.");
    let steam = layers.iter().find(|c| c["id"].as_str().unwrap().ends_with("steam_overlay_64")).unwrap();
    assert_eq!(steam["confidence"], "Inferred");
    assert!(
        steam["statement"].as_str().unwrap().contains("injected")
            && steam["statement"].as_str().unwrap().contains("DISABLE_VK_LAYER_VALVE_steam_overlay_1=1")
    );
    let mesa = layers.iter().find(|c| c["id"].as_str().unwrap().ends_with("MESA_device_select")).unwrap();
    assert!(!mesa["statement"].as_str().unwrap().contains("injected"));

    // Runtimes and the gate per GPU: the bundled libggml-hip has no gfx906 code object (layer 4 blocks), the
    // bundled rocBLAS has gfx906 Tensile files (layer 3 allows); the H100 has no compute capability without
    // nvidia-smi, so no verdict is made up for it.
    let rt = &r["runtimes"]["runtimes"][0];
    assert_eq!((rt["kind"].as_str(), rt["path"].as_str()), (Some("ollama"), Some(at("usr/lib/ollama").as_str())));
    let gates = r["gates"].as_array().unwrap();
    let g906 = gates.iter().find(|g| g["arch"] == "gfx906").unwrap();
    let layers = g906["report"]["layers"].as_array().unwrap();
    assert_eq!((layers[2]["status"].as_str(), layers[3]["status"].as_str()), (Some("Allows"), Some("Blocks")));
    assert!(layers[3]["finding"]
        .as_str()
        .unwrap()
        .contains("libggml-hip.so (ggml GPU backend) has no code object for gfx906"));
    assert!(g906["report"]["verdict"].as_str().unwrap().contains("layer 4 (binaries) blocks it"));
    let h100 = gates.iter().find(|g| g["arch"].is_null()).unwrap();
    assert!(h100["why_none"].as_str().unwrap().contains("nvidia-smi"), "{h100:#}");
    for c in r["claims"].as_array().unwrap() {
        assert!(!c["sources"].as_array().unwrap().is_empty(), "claim without a source: {c:#}");
    }

    // The text form says how many findings, then gives the gate verdicts before the findings they rest on; it fits
    // 120 columns.
    let text_of = |format: &str, out: Option<&Path>| {
        let mut cmd = backscope();
        cmd.args(["doctor", "--user", "alice", "--format", format, "--root"]).arg(root);
        if let Some(o) = out {
            cmd.arg("-o").arg(o);
        }
        cmd.env_clear().env("HOME", "/home/alice").env("HSA_OVERRIDE_GFX_VERSION", "10.3.0").env("OLLAMA_DEBUG", "1");
        stdout_ok(cmd.env("COLUMNS", "120"))
    };
    let text = text_of("text", None);
    crate::support::output::assert_fits(&text, 120);
    assert!(text.starts_with(&format!("backscope doctor (root {}): ", root.display())), "{text}");
    let after_gate = text.split_once("\n\nGate\n").expect("a Gate section").1;
    let gate_part = after_gate.split_once("\n\nGPUs\n").expect("the findings follow the verdicts").0;
    assert!(gate_part.contains("gfx906: (1)") && gate_part.contains("no verdict"), "{gate_part}");

    // The same as Markdown (read by pulldown-cmark) and as an HTML page in Chromium: the verdict for each GPU
    // (the JSON's), every finding as a claim with its confidence badge and sources, nothing loaded.
    let verdict = s(&g906["report"]["verdict"]).to_string();
    let markdown = crate::support::output::commonmark(&text_of("markdown", None));
    let page = tmp.path().join("doctor.html");
    assert!(text_of("html", Some(&page)).is_empty(), "-o: nothing on standard output");
    let (dom, requests) =
        crate::support::output::load_in_chromium(&page, &Path::new(env!("CARGO_TARGET_TMPDIR")).join("doctor.png"));
    assert!(requests.is_empty(), "the page made requests: {requests:?}");
    crate::support::output::assert_no_external_reference(&std::fs::read_to_string(&page).unwrap());
    for doc in [&markdown, &dom] {
        let gate = doc.find(">Gate</h2>").expect("a Gate heading");
        assert!(gate < doc.find(">GPUs</h2>").expect("a GPUs heading"), "verdicts first");
        let verdicts: Vec<String> = doc[gate..]
            .split("<li>")
            .skip(1)
            .take(2)
            .map(|li| crate::support::output::html_text(&li[..li.find("</li>").unwrap()]))
            .collect();
        assert!(verdicts.contains(&format!("{}: {verdict}", s(&g906["gpu"]))), "{verdicts:?}");
        assert!(verdicts.iter().any(|v| v.contains(": no verdict: ")), "{verdicts:?}");
    }
    for c in r["claims"].as_array().unwrap().iter().filter(|c| !s(&c["id"]).starts_with("doctor.gate.")) {
        let badge =
            format!("id=\"claim-{}\"><span class=\"badge {}\">", s(&c["id"]), s(&c["confidence"]).to_lowercase());
        assert!(dom.contains(&badge), "{badge}");
    }
}

//! Which GPU a name means: `--arch gfx906`, `sm_86`, a device's compute capability. The ground type every GPU
//! question starts from (the binaries engine, the knowledge tables, predict and gate all take a [`DeviceArch`]).

/// The GPU a `--arch` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceArch {
    Amd { id: String },
    Nvidia { sm: u32 },
    Unknown(String),
}

impl DeviceArch {
    /// `gfx900`, `gfx90a:xnack-`, `sm_86`, `sm86`, `8.6`, `86`.
    pub fn parse(s: &str) -> DeviceArch {
        let t = s.trim().to_ascii_lowercase();
        if t.starts_with("gfx") {
            return DeviceArch::Amd { id: t };
        }
        let num = t.trim_start_matches("sm_").trim_start_matches("sm").trim_start_matches("compute_");
        let sm = match num.split_once('.') {
            Some((a, b)) => a.parse::<u32>().ok().zip(b.parse::<u32>().ok()).map(|(a, b)| a * 10 + b),
            None => num.parse().ok(),
        };
        match sm {
            Some(sm) if (20..=200).contains(&sm) => DeviceArch::Nvidia { sm },
            _ => DeviceArch::Unknown(s.to_string()),
        }
    }

    pub fn label(&self) -> String {
        match self {
            DeviceArch::Amd { id } => id.clone(),
            DeviceArch::Nvidia { sm } => format!("sm_{sm}"),
            DeviceArch::Unknown(s) => s.clone(),
        }
    }
}

/// Whether a cubin built for `cubin_sm` runs on a GPU of compute capability `device_sm` as it is (no PTX JIT):
/// cubins are binary-compatible within a major version, from older minor to newer.
pub fn cubin_runs_on(cubin_sm: u32, device_sm: u32) -> bool {
    cubin_sm / 10 == device_sm / 10 && cubin_sm <= device_sm
}

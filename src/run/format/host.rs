//! The host a run records: this host's identity as the host floor probes it (`crate::host::identity`), each GPU's
//! ISA named by the GPU floor's tables (AMD's from KFD's `gfx_target_version`, NVIDIA's from the product name).

use crate::gpu::knowledge::{archs, nvidia_products};
use crate::host::identity::{ArchNames, HostIdentity};

/// This host, now, as a run records it.
pub fn this_host() -> HostIdentity {
    HostIdentity::probe(ArchNames { amd: archs::gfx_target_of, nvidia: nvidia_products::arch_of })
}

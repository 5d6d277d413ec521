//! `VK_EXT_device_fault`: what the driver itself says about a device loss (a description, the faulting GPU
//! addresses, the vendor's codes). The layer enables the extension on devices that offer it (RADV does from Mesa
//! 23.1, NVIDIA's driver does) and asks once a call returns `VK_ERROR_DEVICE_LOST`, which is the only time the
//! specification lets it be asked. Off the hooks' paths: only the writer calls it, after a loss.

use std::ffi::CStr;

use ash::vk;
use format::record::{DeviceFault, FaultAddress, FaultVendor};

use crate::dispatch::DeviceDispatch;

pub const EXTENSION: &CStr = c"VK_EXT_device_fault";

/// Addresses and vendor entries kept per device (a driver may report more; the record says what it kept).
pub const MAX_ENTRIES: usize = 16;

/// Whether the layer enables the extension where it is offered (`BACKSCOPE_VK_FAULT` is not `0`).
pub fn wanted() -> bool {
    static WANTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WANTED.get_or_init(|| format::env::on_unless_zero(format::env::VK_FAULT))
}

/// One device's answer, owned (the record borrows from it).
#[derive(Default)]
pub struct Answer {
    pub device: Option<u32>,
    pub description: Vec<u8>,
    pub addresses: Vec<FaultAddress>,
    pub vendor: Vec<(Vec<u8>, u64, u64)>,
    pub vendor_binary_bytes: u64,
}

/// Asks every device whose driver answers `vkGetDeviceFaultInfoEXT` (after a device loss).
pub fn ask_all() -> Vec<Answer> {
    let mut answers = Vec::new();
    crate::dispatch::for_each_device(|d| {
        if let Some(answer) = ask(d) {
            answers.push(answer);
        }
    });
    answers
}

fn ask(d: &DeviceDispatch) -> Option<Answer> {
    let get = d.get_device_fault_info?;
    let mut counts = vk::DeviceFaultCountsEXT::default();
    // SAFETY: the count query (no info structure) on a device created with the extension and its feature.
    let result = unsafe { get(d.device, &mut counts, std::ptr::null_mut()) };
    if result != vk::Result::SUCCESS && result != vk::Result::INCOMPLETE {
        return None;
    }
    let offered_binary = counts.vendor_binary_size;
    counts.address_info_count = counts.address_info_count.min(MAX_ENTRIES as u32);
    counts.vendor_info_count = counts.vendor_info_count.min(MAX_ENTRIES as u32);
    // The vendor's binary dump is not fetched (its size is recorded).
    counts.vendor_binary_size = 0;
    let mut addresses = vec![vk::DeviceFaultAddressInfoEXT::default(); counts.address_info_count as usize];
    let mut vendor = vec![vk::DeviceFaultVendorInfoEXT::default(); counts.vendor_info_count as usize];
    let mut info = vk::DeviceFaultInfoEXT {
        p_address_infos: addresses.as_mut_ptr(),
        p_vendor_infos: vendor.as_mut_ptr(),
        ..Default::default()
    };
    // SAFETY: arrays of the counts given; VK_INCOMPLETE (more than they hold) keeps what fit.
    let result = unsafe { get(d.device, &mut counts, &mut info) };
    if result != vk::Result::SUCCESS && result != vk::Result::INCOMPLETE {
        return None;
    }
    addresses.truncate(counts.address_info_count as usize);
    vendor.truncate(counts.vendor_info_count as usize);
    Some(Answer {
        device: d.facts_id,
        description: crate::device::c_text(&info.description),
        addresses: addresses
            .iter()
            .map(|a| FaultAddress {
                kind: a.address_type.as_raw(),
                address: a.reported_address,
                precision: a.address_precision,
            })
            .collect(),
        vendor: vendor
            .iter()
            .map(|v| (crate::device::c_text(&v.description), v.vendor_fault_code, v.vendor_fault_data))
            .collect(),
        vendor_binary_bytes: offered_binary,
    })
}

/// Calls `f` with the answers as the record's borrowed form.
pub fn with_records(answers: &[Answer], f: impl FnOnce(&[DeviceFault<'_>])) {
    let vendors: Vec<Vec<FaultVendor<'_>>> = answers
        .iter()
        .map(|a| {
            a.vendor
                .iter()
                .map(|(description, code, data)| FaultVendor { description, code: *code, data: *data })
                .collect()
        })
        .collect();
    let faults: Vec<DeviceFault<'_>> = answers
        .iter()
        .zip(&vendors)
        .map(|(a, vendor)| DeviceFault {
            device: a.device,
            description: &a.description,
            addresses: &a.addresses,
            vendor,
            vendor_binary_bytes: a.vendor_binary_bytes,
        })
        .collect();
    f(&faults)
}

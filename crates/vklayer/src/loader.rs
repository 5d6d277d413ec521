//! The loader–layer interface (the Vulkan loader's `vk_layer.h`, "Layer Interface with the Loader"
//! in the loader's documentation), which `ash` does not carry: the negotiation structure, and the
//! link structures the loader chains into `VkInstanceCreateInfo` / `VkDeviceCreateInfo` to tell each
//! layer where the next layer (or driver) is.

use std::ffi::{c_char, c_void};

use ash::vk;

/// `VkNegotiateLayerStructType::LAYER_NEGOTIATE_INTERFACE_STRUCT`.
pub const LAYER_NEGOTIATE_INTERFACE_STRUCT: u32 = 1;
/// The loader–layer interface version this layer implements: 2 (`vkNegotiateLoaderLayerInterfaceVersion`
/// hands the loader `vkGetInstanceProcAddr` and `vkGetDeviceProcAddr`).
pub const INTERFACE_VERSION: u32 = 2;

/// `VkLayerFunction::VK_LAYER_LINK_INFO`: the link structure of the next layer.
pub const LAYER_LINK_INFO: u32 = 0;

/// `PFN_GetPhysicalDeviceProcAddr`.
pub type GetPhysicalDeviceProcAddr =
    Option<unsafe extern "system" fn(instance: vk::Instance, name: *const c_char) -> vk::PFN_vkVoidFunction>;

/// `VkNegotiateLayerInterface`.
#[repr(C)]
pub struct NegotiateLayerInterface {
    pub s_type: u32,
    pub p_next: *mut c_void,
    pub loader_layer_interface_version: u32,
    pub pfn_get_instance_proc_addr: Option<vk::PFN_vkGetInstanceProcAddr>,
    pub pfn_get_device_proc_addr: Option<vk::PFN_vkGetDeviceProcAddr>,
    pub pfn_get_physical_device_proc_addr: GetPhysicalDeviceProcAddr,
}

/// `VkLayerInstanceLink`.
#[repr(C)]
pub struct LayerInstanceLink {
    pub p_next: *mut LayerInstanceLink,
    pub pfn_next_get_instance_proc_addr: vk::PFN_vkGetInstanceProcAddr,
    pub pfn_next_get_physical_device_proc_addr: GetPhysicalDeviceProcAddr,
}

/// `VkLayerInstanceCreateInfo`. Its union is read only as `pLayerInfo` (when `function` is
/// [`LAYER_LINK_INFO`]); the other members are pointers or 64-bit values of the same size, and the
/// two-pointer `layerDevice` member sets the union's size.
#[repr(C)]
pub struct LayerInstanceCreateInfo {
    pub s_type: vk::StructureType,
    pub p_next: *const c_void,
    pub function: u32,
    pub layer_info: *mut LayerInstanceLink,
    _rest_of_union: *mut c_void,
}

/// `VkLayerDeviceLink`.
#[repr(C)]
pub struct LayerDeviceLink {
    pub p_next: *mut LayerDeviceLink,
    pub pfn_next_get_instance_proc_addr: vk::PFN_vkGetInstanceProcAddr,
    pub pfn_next_get_device_proc_addr: vk::PFN_vkGetDeviceProcAddr,
}

/// `VkLayerDeviceCreateInfo`; its union is read only as `pLayerInfo`.
#[repr(C)]
pub struct LayerDeviceCreateInfo {
    pub s_type: vk::StructureType,
    pub p_next: *const c_void,
    pub function: u32,
    pub layer_info: *mut LayerDeviceLink,
}

/// The first two members every Vulkan structure starts with (`VkBaseInStructure`).
#[repr(C)]
pub struct BaseIn {
    pub s_type: vk::StructureType,
    pub p_next: *const BaseIn,
}

/// Longest `pNext` chain walked: real chains have a handful of structures; a cycle (a broken
/// application) must not hang the layer.
pub const MAX_CHAIN: usize = 256;

/// The structures of a `pNext` chain, starting at `p_next`.
///
/// # Safety
/// `p_next` must be null or the start of a valid chain of Vulkan structures, alive while iterating.
pub unsafe fn chain(p_next: *const c_void) -> impl Iterator<Item = *const BaseIn> {
    let mut at = p_next as *const BaseIn;
    std::iter::from_fn(move || {
        if at.is_null() {
            return None;
        }
        let current = at;
        // SAFETY: a non-null element of a valid chain (the caller's promise) starts with BaseIn.
        at = unsafe { (*current).p_next };
        Some(current)
    })
    .take(MAX_CHAIN)
}

/// The loader's link structure for this layer in a `VkInstanceCreateInfo` chain.
///
/// # Safety
/// As for [`chain`].
pub unsafe fn instance_link(p_next: *const c_void) -> Option<*mut LayerInstanceCreateInfo> {
    // SAFETY: forwarded from the caller.
    unsafe { chain(p_next) }.find_map(|s| {
        let info = s as *mut LayerInstanceCreateInfo;
        // SAFETY: a structure whose sType is LOADER_INSTANCE_CREATE_INFO is a VkLayerInstanceCreateInfo.
        let matches = unsafe {
            (*s).s_type == vk::StructureType::LOADER_INSTANCE_CREATE_INFO && (*info).function == LAYER_LINK_INFO
        };
        matches.then_some(info)
    })
}

/// The loader's link structure for this layer in a `VkDeviceCreateInfo` chain.
///
/// # Safety
/// As for [`chain`].
pub unsafe fn device_link(p_next: *const c_void) -> Option<*mut LayerDeviceCreateInfo> {
    // SAFETY: forwarded from the caller.
    unsafe { chain(p_next) }.find_map(|s| {
        let info = s as *mut LayerDeviceCreateInfo;
        // SAFETY: a structure whose sType is LOADER_DEVICE_CREATE_INFO is a VkLayerDeviceCreateInfo.
        let matches = unsafe {
            (*s).s_type == vk::StructureType::LOADER_DEVICE_CREATE_INFO && (*info).function == LAYER_LINK_INFO
        };
        matches.then_some(info)
    })
}

/// The loader's dispatch key of a dispatchable handle (instance, physical device, device, queue,
/// command buffer): the pointer to the loader's dispatch table stored in the object's first word.
/// Objects made from one instance (or one device) share it.
///
/// # Safety
/// `handle` must be a valid dispatchable handle.
#[inline(always)]
pub unsafe fn dispatch_key(handle: *mut u8) -> u64 {
    // SAFETY: every dispatchable object begins with the loader's dispatch pointer.
    unsafe { *(handle as *const usize) as u64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_vk_layer_h_on_64_bit_linux() {
        // vk_layer.h: sType (4) + pad, pNext (8), function (4) + pad, union of at most two pointers.
        assert_eq!(std::mem::size_of::<LayerInstanceCreateInfo>(), 40);
        assert_eq!(std::mem::offset_of!(LayerInstanceCreateInfo, layer_info), 24);
        assert_eq!(std::mem::offset_of!(LayerDeviceCreateInfo, layer_info), 24);
        assert_eq!(std::mem::size_of::<LayerInstanceLink>(), 24);
        assert_eq!(std::mem::size_of::<LayerDeviceLink>(), 24);
        // sType (4) + pad, pNext, version (4) + pad, three function pointers.
        assert_eq!(std::mem::size_of::<NegotiateLayerInterface>(), 48);
        assert_eq!(std::mem::offset_of!(NegotiateLayerInterface, pfn_get_instance_proc_addr), 24);
    }

    #[test]
    fn finds_the_link_structure_in_a_chain_and_stops_on_cycles() {
        let mut link = LayerDeviceCreateInfo {
            s_type: vk::StructureType::LOADER_DEVICE_CREATE_INFO,
            p_next: std::ptr::null(),
            function: LAYER_LINK_INFO,
            layer_info: std::ptr::null_mut(),
        };
        // A data callback structure first (function 1), then the link.
        let callback = LayerDeviceCreateInfo {
            s_type: vk::StructureType::LOADER_DEVICE_CREATE_INFO,
            p_next: &link as *const _ as *const c_void,
            function: 1,
            layer_info: std::ptr::null_mut(),
        };
        let features =
            vk::PhysicalDeviceFeatures2 { p_next: &callback as *const _ as *mut c_void, ..Default::default() };
        // SAFETY: a chain of live structures built above.
        let found = unsafe { device_link(&features as *const _ as *const c_void) };
        assert_eq!(found, Some(&mut link as *mut _));
        // SAFETY: as above.
        assert!(unsafe { instance_link(&features as *const _ as *const c_void) }.is_none());
        let mut cycle = BaseIn { s_type: vk::StructureType::APPLICATION_INFO, p_next: std::ptr::null() };
        cycle.p_next = &cycle;
        // SAFETY: a (cyclic) chain of one live structure.
        assert_eq!(unsafe { chain(&cycle as *const _ as *const c_void) }.count(), MAX_CHAIN);
    }
}

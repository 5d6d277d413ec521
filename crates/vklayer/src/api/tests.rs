use super::objects::{statistics, MAX_EXECUTABLES};
use super::*;
use std::ffi::CStr;
use std::sync::atomic::Ordering;
#[test]
fn negotiation_hands_over_both_proc_addr_functions_at_version_2() {
    let mut n = NegotiateLayerInterface {
        s_type: loader::LAYER_NEGOTIATE_INTERFACE_STRUCT,
        p_next: std::ptr::null_mut(),
        loader_layer_interface_version: 5,
        pfn_get_instance_proc_addr: None,
        pfn_get_device_proc_addr: None,
        pfn_get_physical_device_proc_addr: None,
    };
    // SAFETY: a valid negotiation structure.
    assert_eq!(unsafe { vkNegotiateLoaderLayerInterfaceVersion(&mut n) }, vk::Result::SUCCESS);
    assert_eq!(n.loader_layer_interface_version, 2);
    assert!(n.pfn_get_instance_proc_addr.is_some() && n.pfn_get_device_proc_addr.is_some());
    let mut old = NegotiateLayerInterface { loader_layer_interface_version: 1, ..n };
    // SAFETY: as above.
    assert_ne!(unsafe { vkNegotiateLoaderLayerInterfaceVersion(&mut old) }, vk::Result::SUCCESS);
    // SAFETY: a null pointer is refused before any access.
    assert_ne!(unsafe { vkNegotiateLoaderLayerInterfaceVersion(std::ptr::null_mut()) }, vk::Result::SUCCESS);
}

fn fixed<const N: usize>(text: &str) -> [c_char; N] {
    let mut out = [0 as c_char; N];
    for (o, b) in out.iter_mut().zip(text.bytes()) {
        *o = b as c_char;
    }
    out
}

/// A driver's `vkGetPipelineExecutablePropertiesKHR`: one executable. With a huge count it claims more
/// executables than any pipeline has, to check the layer's bound.
unsafe extern "system" fn properties(
    _: vk::Device,
    info: *const vk::PipelineInfoKHR<'_>,
    count: *mut u32,
    out: *mut vk::PipelineExecutablePropertiesKHR<'_>,
) -> vk::Result {
    // SAFETY: the layer passes valid pointers; `out` has room for `*count` elements.
    unsafe {
        let huge = (*info).pipeline.as_raw() == 2;
        if out.is_null() {
            *count = if huge { 1 << 30 } else { 1 };
        } else {
            for i in 0..*count as usize {
                (*out.add(i)).name = fixed("Compute Shader");
            }
        }
    }
    vk::Result::SUCCESS
}

/// A driver's `vkGetPipelineExecutableStatisticsKHR`: three statistics of three formats.
unsafe extern "system" fn statistics_of(
    _: vk::Device,
    _: *const vk::PipelineExecutableInfoKHR<'_>,
    count: *mut u32,
    out: *mut vk::PipelineExecutableStatisticKHR<'_>,
) -> vk::Result {
    // SAFETY: the layer passes valid pointers; `out` has room for `*count` elements.
    unsafe {
        if out.is_null() {
            *count = 3;
            return vk::Result::SUCCESS;
        }
        let values = [
            (
                "Registers",
                vk::PipelineExecutableStatisticFormatKHR::UINT64,
                vk::PipelineExecutableStatisticValueKHR { u64: 48 },
            ),
            (
                "Spills",
                vk::PipelineExecutableStatisticFormatKHR::BOOL32,
                vk::PipelineExecutableStatisticValueKHR { b32: 0 },
            ),
            (
                "Occupancy",
                vk::PipelineExecutableStatisticFormatKHR::FLOAT64,
                vk::PipelineExecutableStatisticValueKHR { f64: 0.5 },
            ),
        ];
        for (i, (name, format, value)) in values.into_iter().enumerate().take(*count as usize) {
            let s = &mut *out.add(i);
            s.name = fixed(name);
            s.format = format;
            s.value = value;
        }
    }
    vk::Result::SUCCESS
}

unsafe extern "system" fn gdpa(_: vk::Device, name: *const c_char) -> vk::PFN_vkVoidFunction {
    // SAFETY: a command name.
    match unsafe { CStr::from_ptr(name) }.to_bytes() {
        b"vkGetPipelineExecutablePropertiesKHR" => {
            hook!(properties, vk::PFN_vkGetPipelineExecutablePropertiesKHR)
        }
        b"vkGetPipelineExecutableStatisticsKHR" => {
            hook!(statistics_of, vk::PFN_vkGetPipelineExecutableStatisticsKHR)
        }
        _ => None,
    }
}

#[test]
fn driver_statistics_are_read_in_every_format_and_bounded() {
    // SAFETY: `gdpa` resolves the two commands to functions of their types.
    let d = unsafe { DeviceDispatch::new(vk::Device::null(), gdpa, Some(0), true) };
    assert!(d.cmd_dispatch.is_none(), "a command the next link lacks stays absent");
    // SAFETY: the fake driver accepts any pipeline.
    let stats = unsafe { statistics(&d, vk::Pipeline::from_raw(1)) };
    let read: Vec<(&str, &str, f64)> =
        stats.iter().map(|s| (s.executable.as_str(), s.name.as_str(), s.value)).collect();
    assert_eq!(
        read,
        [
            ("Compute Shader", "Registers", 48.0),
            ("Compute Shader", "Spills", 0.0),
            ("Compute Shader", "Occupancy", 0.5)
        ]
    );
    // SAFETY: as above.
    let many = unsafe { statistics(&d, vk::Pipeline::from_raw(2)) };
    assert_eq!(many.len(), MAX_EXECUTABLES as usize * 3, "executables read are bounded");
}

/// A fake next link for `vkCreateDevice`: a physical device that offers pipeline statistics, and a
/// `vkCreateDevice` that records what it was asked for (and refuses the layer's version when told to).
mod next_link {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64};
    use std::sync::Mutex;

    pub static INSTANCE_KEY: usize = 0x1000_0001;
    pub static DEVICE_KEY: usize = 0x2000_0001;
    pub static REFUSE_ADDED_EXTENSION: AtomicBool = AtomicBool::new(false);
    /// The physical device also offers AMD's buffer markers and device-coherent memory (with its feature), as RADV
    /// does.
    pub static OFFER_AMD: AtomicBool = AtomicBool::new(false);
    /// Per `vkCreateDevice`, the device-coherent memory feature's value in the chain (None: not chained).
    pub static COHERENT: Mutex<Vec<Option<bool>>> = Mutex::new(Vec::new());
    /// One `vkCreateDevice` the next link saw: the extension names and the feature's value in the chain
    /// (None: not chained).
    pub type Call = (Vec<String>, Option<bool>);
    pub static CALLS: Mutex<Vec<Call>> = Mutex::new(Vec::new());
    pub static CREATED: AtomicU64 = AtomicU64::new(0);

    pub unsafe extern "system" fn gipa(_: vk::Instance, name: *const c_char) -> vk::PFN_vkVoidFunction {
        // SAFETY: a command name.
        match unsafe { CStr::from_ptr(name) }.to_bytes() {
            b"vkCreateDevice" => hook!(create, vk::PFN_vkCreateDevice),
            b"vkEnumerateDeviceExtensionProperties" => {
                hook!(extensions, vk::PFN_vkEnumerateDeviceExtensionProperties)
            }
            b"vkGetPhysicalDeviceFeatures2" => hook!(features2, vk::PFN_vkGetPhysicalDeviceFeatures2),
            _ => None,
        }
    }

    pub unsafe extern "system" fn gdpa(_: vk::Device, _: *const c_char) -> vk::PFN_vkVoidFunction {
        None
    }

    unsafe extern "system" fn extensions(
        _: vk::PhysicalDevice,
        _: *const c_char,
        count: *mut u32,
        out: *mut vk::ExtensionProperties,
    ) -> vk::Result {
        let offered: &[&str] = if OFFER_AMD.load(std::sync::atomic::Ordering::Relaxed) {
            &["VK_KHR_pipeline_executable_properties", "VK_AMD_buffer_marker", "VK_AMD_device_coherent_memory"]
        } else {
            &["VK_KHR_pipeline_executable_properties"]
        };
        // SAFETY: valid pointers from the layer; room for `*count` elements.
        unsafe {
            if !out.is_null() {
                for (i, name) in offered.iter().take(*count as usize).enumerate() {
                    (*out.add(i)).extension_name = fixed(name);
                }
            }
            *count = offered.len() as u32;
        }
        vk::Result::SUCCESS
    }

    unsafe extern "system" fn features2(_: vk::PhysicalDevice, features: *mut vk::PhysicalDeviceFeatures2<'_>) {
        // SAFETY: the layer's output chain.
        for s in unsafe { loader::chain((*features).p_next) } {
            // SAFETY: a structure of the chain; its sType says which.
            if unsafe { (*s).s_type } == vk::StructureType::PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR
            {
                let f = s as *mut vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR<'_>;
                // SAFETY: that sType is this structure, writable (an output chain).
                unsafe { (*f).pipeline_executable_info = vk::TRUE };
            }
            // SAFETY: as above.
            if unsafe { (*s).s_type } == vk::StructureType::PHYSICAL_DEVICE_COHERENT_MEMORY_FEATURES_AMD {
                let f = s as *mut vk::PhysicalDeviceCoherentMemoryFeaturesAMD<'_>;
                // SAFETY: as above.
                unsafe { (*f).device_coherent_memory = vk::TRUE };
            }
        }
    }

    unsafe extern "system" fn create(
        _: vk::PhysicalDevice,
        info: *const vk::DeviceCreateInfo<'_>,
        _: *const vk::AllocationCallbacks<'_>,
        out: *mut vk::Device,
    ) -> vk::Result {
        // SAFETY: the create info the layer forwards.
        let info = unsafe { &*info };
        let names: Vec<String> = (0..info.enabled_extension_count as usize)
            // SAFETY: that many extension names.
            .map(|i| unsafe { CStr::from_ptr(*info.pp_enabled_extension_names.add(i)) }.to_string_lossy().into())
            .collect();
        let mut feature = None;
        // SAFETY: the chain of a valid create info.
        for s in unsafe { loader::chain(info.p_next) } {
            // SAFETY: a structure of the chain; its sType says which.
            if unsafe { (*s).s_type } == vk::StructureType::PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR
            {
                let f = s as *const vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR<'_>;
                // SAFETY: that sType is this structure.
                feature = Some(unsafe { (*f).pipeline_executable_info } == vk::TRUE);
            }
        }
        let mut coherent = None;
        // SAFETY: as above.
        for s in unsafe { loader::chain(info.p_next) } {
            // SAFETY: as above.
            if unsafe { (*s).s_type } == vk::StructureType::PHYSICAL_DEVICE_COHERENT_MEMORY_FEATURES_AMD {
                let f = s as *const vk::PhysicalDeviceCoherentMemoryFeaturesAMD<'_>;
                // SAFETY: as above.
                coherent = Some(unsafe { (*f).device_coherent_memory } == vk::TRUE);
            }
        }
        COHERENT.lock().unwrap().push(coherent);
        let added = names.iter().any(|n| n == "VK_KHR_pipeline_executable_properties") && feature == Some(true);
        CALLS.lock().unwrap().push((names, feature));
        if added && REFUSE_ADDED_EXTENSION.load(std::sync::atomic::Ordering::Relaxed) {
            return vk::Result::ERROR_FEATURE_NOT_PRESENT;
        }
        CREATED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: `out` is the caller's; the handle is a pointer to a word holding the device's key.
        unsafe { *out = vk::Device::from_raw(&DEVICE_KEY as *const usize as u64) };
        vk::Result::SUCCESS
    }
}

/// Creates a device through the layer's `vkCreateDevice` with the fake next link; the application's create info
/// chains `app_feature` when given. Returns what the next link was asked for and the device's table.
fn create_through_layer(app_feature: Option<bool>) -> (Vec<next_link::Call>, &'static DeviceDispatch) {
    next_link::CALLS.lock().unwrap().clear();
    let physical = vk::PhysicalDevice::from_raw(&next_link::INSTANCE_KEY as *const usize as u64);
    let mut link = loader::LayerDeviceLink {
        p_next: std::ptr::null_mut(),
        pfn_next_get_instance_proc_addr: next_link::gipa,
        pfn_next_get_device_proc_addr: next_link::gdpa,
    };
    let mut feature = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR {
        pipeline_executable_info: if app_feature == Some(true) { vk::TRUE } else { vk::FALSE },
        ..Default::default()
    };
    let chain_info = loader::LayerDeviceCreateInfo {
        s_type: vk::StructureType::LOADER_DEVICE_CREATE_INFO,
        p_next: if app_feature.is_some() { &mut feature as *mut _ as *const c_void } else { std::ptr::null() },
        function: loader::LAYER_LINK_INFO,
        layer_info: &mut link,
    };
    let names = [c"VK_KHR_16bit_storage".as_ptr()];
    let info = vk::DeviceCreateInfo {
        p_next: &chain_info as *const _ as *const c_void,
        enabled_extension_count: 1,
        pp_enabled_extension_names: names.as_ptr(),
        ..Default::default()
    };
    let mut device = vk::Device::null();
    // SAFETY: a physical device whose dispatch key names the fake instance; a create info with the link.
    let result = unsafe { create_device(physical, &info, std::ptr::null(), &mut device) };
    assert_eq!(result, vk::Result::SUCCESS);
    let calls = next_link::CALLS.lock().unwrap().clone();
    (calls, device_of(device).expect("the device's table is registered"))
}

#[test]
fn device_creation_adds_what_the_layer_uses_unless_the_application_decided() {
    let _serial = crate::pipelines::tests::TEST_LOCK.lock().unwrap();
    let dir = std::env::temp_dir().join(format!("backscope-vklayer-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::env::set_var("BACKSCOPE_TRACE_DIR", &dir);
    std::env::set_var("BACKSCOPE_TRACE_INTERVAL_MS", "0");
    crate::start::start();
    assert!(state::on());
    // SAFETY: `gipa` resolves the fake next link's commands.
    let table = unsafe { InstanceDispatch::new(vk::Instance::null(), next_link::gipa) };
    assert!(dispatch::add_instance(next_link::INSTANCE_KEY as u64, table));

    // Offered and supported, the application silent: the layer adds the extension and the feature.
    let (calls, d) = create_through_layer(None);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].0, ["VK_KHR_16bit_storage", "VK_KHR_pipeline_executable_properties"]);
    assert_eq!(calls[0].1, Some(true));
    assert!(d.capture_statistics);

    // The driver refuses the layer's version: the application's own create info, unchanged, is what counts.
    next_link::REFUSE_ADDED_EXTENSION.store(true, Ordering::Relaxed);
    let (calls, d) = create_through_layer(None);
    next_link::REFUSE_ADDED_EXTENSION.store(false, Ordering::Relaxed);
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1], (vec!["VK_KHR_16bit_storage".to_string()], None));
    assert!(!d.capture_statistics);

    // The application chained the feature: its choice stands, and the create info is forwarded as it is.
    for choice in [false, true] {
        let (calls, d) = create_through_layer(Some(choice));
        assert_eq!(calls, [(vec!["VK_KHR_16bit_storage".to_string()], Some(choice))]);
        assert_eq!(d.capture_statistics, choice);
    }

    // A device that offers AMD's buffer markers and device-coherent memory: the layer adds both extensions and the
    // coherent memory feature; refused, the application's create info is forwarded as it is.
    next_link::OFFER_AMD.store(true, Ordering::Relaxed);
    next_link::COHERENT.lock().unwrap().clear();
    let (calls, _) = create_through_layer(None);
    assert_eq!(
        calls[0].0,
        [
            "VK_KHR_16bit_storage",
            "VK_KHR_pipeline_executable_properties",
            "VK_AMD_buffer_marker",
            "VK_AMD_device_coherent_memory"
        ]
    );
    assert_eq!(*next_link::COHERENT.lock().unwrap(), [Some(true)]);
    next_link::REFUSE_ADDED_EXTENSION.store(true, Ordering::Relaxed);
    let (calls, _) = create_through_layer(None);
    next_link::REFUSE_ADDED_EXTENSION.store(false, Ordering::Relaxed);
    assert_eq!(calls[1], (vec!["VK_KHR_16bit_storage".to_string()], None));
    assert_eq!(next_link::COHERENT.lock().unwrap()[1..], [Some(true), None]);
    next_link::OFFER_AMD.store(false, Ordering::Relaxed);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn global_commands_resolve_without_an_instance_and_others_do_not() {
    // SAFETY: command names are C strings; a null instance is allowed for global commands.
    unsafe {
        assert!(get_instance_proc_addr(vk::Instance::null(), c"vkCreateInstance".as_ptr()).is_some());
        assert!(get_instance_proc_addr(vk::Instance::null(), c"vkCmdDispatch".as_ptr()).is_none());
        assert!(get_device_proc_addr(vk::Device::null(), c"vkGetDeviceProcAddr".as_ptr()).is_some());
        assert!(get_device_proc_addr(vk::Device::null(), c"vkCmdDispatch".as_ptr()).is_none());
    }
}

//! Starting the layer in a process (at its first `vkCreateInstance`): the tables, then, once observation is on, the
//! writer thread, the crash handler and each module's fork handlers. The one module that knows them all, so that
//! `state` knows none of them.

use format::env::Settings;
use format::fork::{self, ForkHandlers};

use crate::{blackbox, commands, crash, dispatch, locus, order, pipelines, state, writer};

/// Starts the layer, once per process (later calls do nothing).
pub fn start() {
    // The settings the bind and dispatch hooks read at every call without working them out
    // (`flag::OnceFlag::worked_out_yes`), worked out before any command buffer can exist, observing or not.
    crate::impersonate::impersonating();
    crate::progress::markers_per_dispatch();
    crate::progress::markers_at_barriers();
    state::start(prepare, started);
}

fn prepare(settings: &Settings) {
    pipelines::init(settings.max_kernels);
    order::init(format::env::on_unless_zero(format::env::VK_ORDER));
    if format::env::get(format::env::VK_PAUSED).as_deref().map(str::trim) == Some("1") {
        crate::switch::backscope_vk_set_observing(0);
    }
    // Each module's locks and per-process state, in the order a child releases them (the state, which switches
    // the child off, registers its own next). A failure (no memory for pthread_atfork) leaves a forked child
    // with the parent's locks, as it always was before the layer started; observation in this process goes on.
    let handlers: [ForkHandlers; 7] =
        [dispatch::FORK, pipelines::FORK, commands::FORK, order::FORK, writer::FORK, crash::FORK, locus::FORK];
    for handlers in handlers {
        let _ = fork::register(handlers);
    }
}

fn started(settings: &Settings) {
    writer::spawn_thread(settings.interval_ms, blackbox::poll_semaphores);
    crash::arm();
    blackbox::start_watcher();
}

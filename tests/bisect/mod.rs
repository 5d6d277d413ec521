//! `backscope bisect`: marker builds, real PyPI builds, release archives, hostile stores, the build cache.

pub(crate) mod cache;
pub(crate) mod cli;
pub(crate) mod hostile;
pub(crate) mod pypi_builds;
pub(crate) mod release_archives;
pub(crate) mod postgres;

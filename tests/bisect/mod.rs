//! `backscope bisect`: marker builds, real PyPI builds, release archives, hostile stores, the build cache.

mod cache;
mod cli;
mod hostile;
mod postgres;
mod pypi_builds;
mod release_archives;

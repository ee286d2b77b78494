//! The settings libfabric and its providers read once, when libfabric
//! starts (its first `fi_getinfo` in the process), on which a guarantee of
//! the crate's rests: see `quirks::caches_registrations` and
//! `quirks::lets_peers_write_receive_memory`.
//!
//! libfabric reads a parameter from the environment and, from 1.22, from
//! its configuration file, `libfabric.conf` under the `SYSCONFDIR` it was
//! built with: the file's value when the variable is unset, or first when
//! `FI_PREFER_SYSCONFIG` says so (`fi_param_get`, `src/var.c` 347-369,
//! `load_conf` 275-318 in 2.1). A program that changes a variable after
//! the start (`std::env::set_var`) changes nothing libfabric does.
//!
//! So the crate notes the settings just before its first `fi_getinfo`,
//! reading the configuration file the loaded library names, and a setting
//! counts only if it holds for every value libfabric may have used: the
//! variable then and now, and the file's (either may win, as
//! `FI_PREFER_SYSCONFIG` decides).
//!
//! Not seen: a library that started libfabric through C before the
//! crate's first call, and a thread that changes a variable between the
//! note and libfabric's start.

use std::sync::OnceLock;

/// A setting the crate's guarantees rest on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub(crate) enum StartupVar {
    MrCacheMaxCount,
    MrCacheMonitor,
    RxmRndvWrite,
}

impl StartupVar {
    const ALL: [StartupVar; 3] = [
        StartupVar::MrCacheMaxCount,
        StartupVar::MrCacheMonitor,
        StartupVar::RxmRndvWrite,
    ];

    /// Its environment variable, as named in the configuration file too.
    fn name(self) -> &'static str {
        match self {
            StartupVar::MrCacheMaxCount => "FI_MR_CACHE_MAX_COUNT",
            StartupVar::MrCacheMonitor => "FI_MR_CACHE_MONITOR",
            StartupVar::RxmRndvWrite => "FI_OFI_RXM_USE_RNDV_WRITE",
        }
    }
}

/// The settings at libfabric's start: each variable, and the configuration
/// file's value.
struct AtStart {
    env: [Option<String>; 3],
    file: [Option<String>; 3],
}

static AT_START: OnceLock<AtStart> = OnceLock::new();

/// Notes the settings, once: called before every `fi_getinfo`.
pub(crate) fn note() {
    AT_START.get_or_init(|| {
        let file = config_file();
        AtStart {
            env: StartupVar::ALL.map(|v| std::env::var(v.name()).ok()),
            file: StartupVar::ALL.map(|v| config_value(&file, v.name())),
        }
    });
}

/// Whether `holds` of every value (`None`: unset) libfabric may have read
/// for `var`: the variable now and when libfabric started (when the crate
/// saw it start), or the configuration file's.
pub(crate) fn always(var: StartupVar, holds: impl Fn(Option<&str>) -> bool) -> bool {
    let now = std::env::var(var.name()).ok();
    let Some(start) = AT_START.get() else {
        return holds(now.as_deref());
    };
    let file = start.file[var as usize].as_deref();
    let read = |env: Option<&str>| match (env, file) {
        // The file's value is used when the variable is unset.
        (None, Some(file)) => holds(Some(file)),
        // Either, as FI_PREFER_SYSCONFIG decides.
        (Some(env), Some(file)) => holds(Some(env)) && holds(Some(file)),
        (env, None) => holds(env),
    };
    read(now.as_deref()) && read(start.env[var as usize].as_deref())
}

/// The `NAME=value` lines of the configuration file of the libfabric this
/// process loaded, as `load_conf` reads them (up to the first `=`; the
/// value to the end of the line); empty when it has none (before 1.22, or
/// no file).
fn config_file() -> Vec<(String, String)> {
    let Some(path) = config_path() else {
        return Vec::new();
    };
    let Ok(text) = std::fs::read(path) else {
        return Vec::new();
    };
    String::from_utf8_lossy(&text)
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}

/// The first value `file` gives `name` (`find_conf_entry` takes the first).
fn config_value(file: &[(String, String)], name: &str) -> Option<String> {
    file.iter()
        .find(|(n, _)| n == name)
        .map(|(_, value)| value.clone())
}

/// Where the loaded libfabric reads its configuration file: the path built
/// into it (`DEFAULT_CONF_FILE_PATH`, `SYSCONFDIR "/libfabric.conf"`, or
/// `"libfabric.conf"` in the working directory without one), found in the
/// library file mapped into this process.
fn config_path() -> Option<std::path::PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let library = maps
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| {
            let file = path.rsplit('/').next().unwrap_or("");
            file.starts_with("libfabric.so")
        })?;
    let bytes = std::fs::read(library).ok()?;
    const NAME: &[u8] = b"libfabric.conf\0";
    let end = bytes.windows(NAME.len()).position(|w| w == NAME)? + NAME.len() - 1;
    let start = bytes[..end]
        .iter()
        .rposition(|&b| b == 0)
        .map_or(0, |at| at + 1);
    let path = std::str::from_utf8(&bytes[start..end]).ok()?;
    (path == "libfabric.conf" || path.ends_with("/libfabric.conf")).then(|| path.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_holds_only_if_it_holds_for_every_value_libfabric_may_read() {
        let is_zero = |v: Option<&str>| v == Some("0");
        // No note taken in this unit test binary unless a test called
        // getinfo: the variable alone decides then.
        if AT_START.get().is_none() {
            assert_eq!(
                always(StartupVar::MrCacheMaxCount, is_zero),
                std::env::var("FI_MR_CACHE_MAX_COUNT").as_deref() == Ok("0")
            );
        }
        let file = vec![
            ("FI_A".to_string(), "1".to_string()),
            ("FI_A".to_string(), "2".to_string()),
            ("FI_B".to_string(), "x=y".to_string()),
        ];
        assert_eq!(config_value(&file, "FI_A").as_deref(), Some("1"));
        assert_eq!(config_value(&file, "FI_B").as_deref(), Some("x=y"));
        assert_eq!(config_value(&file, "FI_C"), None);
    }

    #[test]
    fn the_loaded_librarys_configuration_path_is_found_where_it_has_one() {
        // Load libfabric (this test binary links it; a call maps it).
        let _ = crate::info::getinfo(&crate::info::Hints::new().provider("tcp"));
        let path = config_path();
        let runtime = libfabric_sys::fabric::runtime_version();
        let (major, minor) = (
            libfabric_sys::fabric::FI_MAJOR(runtime),
            libfabric_sys::fabric::FI_MINOR(runtime),
        );
        println!("libfabric {major}.{minor}: configuration file {path:?}");
        // 1.17 reads none; 1.22 and later one at the path built in.
        if (major, minor) <= (1, 17) {
            assert_eq!(path, None);
        } else if (major, minor) >= (1, 22) {
            let path = path.expect("the configuration file's path in libfabric");
            assert!(path.ends_with("libfabric.conf"), "{path:?}");
        }
    }
}

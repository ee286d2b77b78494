//! The settings libfabric and its providers read once, when libfabric
//! starts (its first `fi_getinfo` in the process), on which a guarantee of
//! the crate's rests: see `quirks::caches_registrations` and
//! `quirks::lets_peers_write_receive_memory`.
//!
//! libfabric reads a parameter from the environment and, from 1.18, from
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
//! When the configuration cannot be told (a libfabric from 1.18 on in
//! which no one path is found, or linked statically; a library file
//! replaced while mapped; a file that could not be read), no setting
//! counts.
//!
//! Not seen: a library that started libfabric through C before the
//! crate's first call; a thread that changes a variable, or a process
//! that changes the configuration file, between the note and libfabric's
//! start (both are read just before the crate's first `fi_getinfo`, which
//! starts libfabric).

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

/// The settings at libfabric's start: each variable, and the
/// configuration files of the libfabric libraries mapped into the process
/// (`None`: not known).
struct AtStart {
    env: [Option<String>; 3],
    files: Option<Vec<ConfigFile>>,
}

/// A configuration file's `NAME=value` entries, in order.
type ConfigFile = Vec<(String, String)>;

static AT_START: OnceLock<AtStart> = OnceLock::new();

/// Notes the settings, once: called before every `fi_getinfo`.
pub(crate) fn note() {
    AT_START.get_or_init(|| AtStart {
        env: StartupVar::ALL.map(|v| env_value(v.name())),
        files: config_files(),
    });
}

/// A variable as libfabric's `getenv` sees it: a value that is not UTF-8
/// is kept, its bytes replaced, so that it matches no value the crate
/// takes as safe.
fn env_value(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}

/// Whether `holds` of every value (`None`: unset) libfabric may have read
/// for `var`: the variable now and when libfabric started (when the crate
/// saw it start), each with each configuration file's value. False when
/// the configuration is not known.
pub(crate) fn always(var: StartupVar, holds: impl Fn(Option<&str>) -> bool) -> bool {
    let now = env_value(var.name());
    let Some(start) = AT_START.get() else {
        return holds(now.as_deref());
    };
    let Some(files) = &start.files else {
        return false;
    };
    let read = |env: Option<&str>, file: Option<&str>| match (env, file) {
        // The file's value is used when the variable is unset.
        (None, Some(file)) => holds(Some(file)),
        // Either, as FI_PREFER_SYSCONFIG decides.
        (Some(env), Some(file)) => holds(Some(env)) && holds(Some(file)),
        (env, None) => holds(env),
    };
    let file_values: Vec<Option<&str>> = if files.is_empty() {
        vec![None]
    } else {
        files.iter().map(|f| config_value(f, var.name())).collect()
    };
    [now.as_deref(), start.env[var as usize].as_deref()]
        .iter()
        .all(|&env| file_values.iter().all(|&file| read(env, file)))
}

/// The configuration files of the libfabric libraries mapped into this
/// process, each read as libfabric reads it; empty where they have none
/// (1.17 and before); `None` when that cannot be told: a library from
/// 1.18 on in which no one path is found, a libfabric linked statically
/// (no library mapped) from 1.18 on, a library file replaced while
/// mapped, or a file that could not be read.
fn config_files() -> Option<Vec<ConfigFile>> {
    let maps = std::fs::read("/proc/self/maps").ok()?;
    let maps = String::from_utf8_lossy(&maps);
    let mut libraries: Vec<&str> = Vec::new();
    for line in maps.lines() {
        // The path is what follows the first five fields.
        let mut rest = line;
        for _ in 0..5 {
            rest = rest.trim_start();
            rest = rest.split_once(' ').map_or("", |(_, r)| r);
        }
        let path = rest.trim_start();
        let file = path.rsplit('/').next().unwrap_or("");
        if file.starts_with("libfabric") && file.contains(".so") {
            if path.ends_with(" (deleted)") {
                return None;
            }
            if !libraries.contains(&path) {
                libraries.push(path);
            }
        }
    }
    let runtime = libfabric_sys::fabric::runtime_version();
    // Configuration files came with 1.18.
    let has_files =
        !libfabric_sys::fabric::FI_VERSION_LT(runtime, libfabric_sys::fabric::FI_VERSION(1, 18));
    if !has_files {
        return Some(Vec::new());
    }
    if libraries.is_empty() {
        return None;
    }
    let mut files = Vec::new();
    for library in libraries {
        let path = config_path(&std::fs::read(library).ok()?)?;
        files.push(match std::fs::read(path) {
            Ok(bytes) => parse_config(&bytes),
            // What makes libfabric's fopen fail: no entries.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
                ) =>
            {
                Vec::new()
            }
            Err(_) => return None,
        });
    }
    Some(files)
}

/// `NAME=value` entries as `load_conf` reads them (`src/var.c` 275-318 in
/// 2.1): `fgets` of at most 2047 bytes (a longer line goes on as lines of
/// its own), each a C string (up to a NUL), the name up to the first `=`,
/// the value after it without the line's `\n`; a line with no `=` is
/// skipped. Bytes that are not UTF-8 are replaced, so that they match no
/// name and no value the crate takes as safe.
fn parse_config(bytes: &[u8]) -> ConfigFile {
    const FGETS: usize = 2047;
    let mut entries = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let window = &rest[..rest.len().min(FGETS)];
        let take = window
            .iter()
            .position(|&b| b == b'\n')
            .map_or(window.len(), |i| i + 1);
        let line = &rest[..take];
        rest = &rest[take..];
        let line = &line[..line.iter().position(|&b| b == 0).unwrap_or(line.len())];
        let Some(eq) = line.iter().position(|&b| b == b'=') else {
            continue;
        };
        let value = &line[eq + 1..];
        let value = value.strip_suffix(b"\n").unwrap_or(value);
        entries.push((
            String::from_utf8_lossy(&line[..eq]).into_owned(),
            String::from_utf8_lossy(value).into_owned(),
        ));
    }
    entries
}

/// The first value `file` gives `name` (`find_conf_entry` takes the first).
fn config_value<'f>(file: &'f ConfigFile, name: &str) -> Option<&'f str> {
    file.iter()
        .find(|(n, _)| n == name)
        .map(|(_, value)| value.as_str())
}

/// Where a libfabric library reads its configuration file: the path built
/// into it (`DEFAULT_CONF_FILE_PATH`, `SYSCONFDIR "/libfabric.conf"`, or
/// `"libfabric.conf"` in the working directory without one), a C string
/// of the library file. `None` unless exactly one such path is in it.
fn config_path(library: &[u8]) -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    const NAME: &[u8] = b"libfabric.conf\0";
    let mut found: Option<&[u8]> = None;
    for at in library
        .windows(NAME.len())
        .enumerate()
        .filter(|(_, w)| *w == NAME)
        .map(|(at, _)| at)
    {
        let end = at + NAME.len() - 1;
        let start = library[..end]
            .iter()
            .rposition(|&b| b == 0)
            .map_or(0, |zero| zero + 1);
        let path = &library[start..end];
        let a_path = path == b"libfabric.conf"
            || (path.starts_with(b"/") && path.ends_with(b"/libfabric.conf"));
        match found {
            _ if !a_path => {}
            Some(other) if other != path => return None,
            _ => found = Some(path),
        }
    }
    found.map(|path| std::ffi::OsStr::from_bytes(path).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_files_are_read_as_libfabric_reads_them() {
        let mut file = b"# a comment\nFI_A=1\nFI_A=2\r\nFI_B=x=y\nFI_C=off\r\n".to_vec();
        // A line of over 2047 bytes goes on as a line of its own.
        file.extend(std::iter::repeat_n(b'#', 2047));
        file.extend(b"FI_D=on\n");
        // A C string: what follows a NUL is not read.
        file.extend(b"FI_E\0=1\nFI_F=0\0junk\n");
        let file = parse_config(&file);
        assert_eq!(config_value(&file, "FI_A"), Some("1"));
        assert_eq!(config_value(&file, "FI_B"), Some("x=y"));
        // libfabric strips the newline only: "off\r" is no "off".
        assert_eq!(config_value(&file, "FI_C"), Some("off\r"));
        assert_eq!(config_value(&file, "FI_D"), Some("on"));
        assert_eq!(config_value(&file, "FI_E"), None);
        assert_eq!(config_value(&file, "FI_F"), Some("0"));
        assert_eq!(config_value(&file, "# a comment"), None);
    }

    #[test]
    fn the_path_built_into_a_library_is_found() {
        let lib = b"\0junk\0(libfabric.conf) and more\0/opt/lf/etc/libfabric.conf\0tail".to_vec();
        assert_eq!(
            config_path(&lib),
            Some(std::path::PathBuf::from("/opt/lf/etc/libfabric.conf"))
        );
        assert_eq!(
            config_path(b"\0libfabric.conf\0"),
            Some("libfabric.conf".into())
        );
        assert_eq!(config_path(b"\0no path here\0"), None);
        assert_eq!(config_path(b"\0etc/libfabric.conf\0"), None);
        // The same path twice is one; two paths are none (not told apart).
        assert_eq!(
            config_path(b"\0/a/libfabric.conf\0/a/libfabric.conf\0"),
            Some("/a/libfabric.conf".into())
        );
        assert_eq!(
            config_path(b"\0/a/libfabric.conf\0/b/libfabric.conf\0"),
            None
        );
    }

    #[test]
    fn the_loaded_librarys_configuration_is_known() {
        // Load libfabric (this test binary links it; a call maps it).
        let _ = crate::info::getinfo(&crate::info::Hints::new().provider("tcp"));
        let runtime = libfabric_sys::fabric::runtime_version();
        let (major, minor) = (
            libfabric_sys::fabric::FI_MAJOR(runtime),
            libfabric_sys::fabric::FI_MINOR(runtime),
        );
        let files = config_files();
        println!("libfabric {major}.{minor}: configuration files {files:?}");
        let files = files.expect("the loaded libfabric's configuration");
        // 1.17 reads none; later ones one, at the path built in.
        assert_eq!(files.is_empty(), (major, minor) <= (1, 17), "{files:?}");
    }
}

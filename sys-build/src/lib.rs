//! The build-script half of the `ofi-sys` (libfabric) and `libibverbs-sys`
//! crates: one place for what both do with their native library.
//!
//! For one library, a `-sys` crate's build script
//! 1. [`probe`]s it with pkg-config (failing with an install hint that names
//!    the Debian and Fedora packages, the version found and the version
//!    required) and locates its headers,
//! 2. [`generate`]s bindings with bindgen over exactly those headers, with
//!    a C shim for every `static inline` function (`wrap_static_fns`),
//! 3. [`write_bindings`] into `OUT_DIR` (and into `src/pregenerated/` when
//!    `<PREFIX>_REGENERATE` is set),
//! 4. [`compile`]s the shim and an ABI probe against the same headers: a C
//!    and a Rust table of the size and field offsets of every struct and
//!    union, which the crate's `tests/abi.rs` compares.
//!
//! With `DOCS_RS` set ([`docs_rs`]), nothing is probed, generated or linked:
//! [`use_pregenerated`] copies the checked-in bindings instead.
//!
//! This crate is a build dependency only; it has no run-time part.

use std::collections::BTreeSet;
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{exit, Command};

pub use bindgen;

/// One native library and what its `-sys` crate generates from it.
#[derive(Debug, Clone, Copy)]
pub struct Library {
    /// The `-sys` crate's package name, for messages.
    pub crate_name: &'static str,
    /// The `-sys` crate's prefix for environment variables and C symbols
    /// (`OFI_SYS` gives `OFI_SYS_REGENERATE` and `ofi_sys_abi_table`).
    pub prefix: &'static str,
    /// pkg-config package.
    pub pkg: &'static str,
    /// Minimum version, if any.
    pub min_version: Option<&'static str>,
    /// Debian/Ubuntu development package.
    pub debian: &'static str,
    /// Fedora/RHEL development package.
    pub fedora: &'static str,
    /// Headers, relative to an include directory.
    pub headers: &'static [&'static str],
    /// bindgen allowlist of functions.
    pub functions: &'static str,
    /// bindgen allowlist of types.
    pub types: &'static str,
    /// bindgen allowlist of variables and macros.
    pub vars: &'static str,
    /// Prefixes of the C struct and union tags the ABI table compares.
    pub abi_tags: &'static [&'static str],
}

/// What [`probe`] found.
#[derive(Debug)]
pub struct Found {
    /// The version pkg-config reports.
    pub version: String,
    /// Include directories, pkg-config's first.
    pub include_dirs: Vec<PathBuf>,
    /// The absolute path of each of [`Library::headers`], in order.
    pub headers: Vec<PathBuf>,
}

/// Types that come from the `libc` crate instead of being generated again.
const LIBC_TYPES: &[&str] = &[
    "iovec",
    "pollfd",
    "timespec",
    "sockaddr",
    "pthread_mutex_t",
    "pthread_cond_t",
    "pthread_attr_t",
    "pthread_t",
    "socklen_t",
    "size_t",
    "ssize_t",
    "off_t",
];

impl Library {
    fn regenerate_var(&self) -> String {
        format!("{}_REGENERATE", self.prefix)
    }

    fn symbol_prefix(&self) -> String {
        self.prefix.to_ascii_lowercase()
    }

    /// Suffix of every shim symbol, so that it never clashes with another
    /// crate's shim of the same inline function.
    fn shim_suffix(&self) -> String {
        format!("__{}_shim", self.symbol_prefix())
    }
}

fn out_dir() -> PathBuf {
    PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"))
}

fn pregenerated_dir() -> PathBuf {
    PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
        .join("src/pregenerated")
}

/// Prints the `rerun-if` lines every build of `lib` depends on.
pub fn rerun_if_changed(lib: &Library) {
    println!("cargo:rerun-if-changed=build.rs");
    for var in [
        "DOCS_RS",
        "PKG_CONFIG_PATH",
        "PKG_CONFIG_LIBDIR",
        &lib.regenerate_var(),
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
}

/// Whether this is a documentation build without native libraries (docs.rs
/// sets `DOCS_RS`).
#[must_use]
pub fn docs_rs() -> bool {
    env::var_os("DOCS_RS").is_some()
}

/// Copies the checked-in bindings `files` from `src/pregenerated/` into
/// `OUT_DIR` and returns the first one's text. Links nothing.
///
/// # Panics
/// Outside a build script (no `OUT_DIR` or `CARGO_MANIFEST_DIR`), for an
/// empty `files`, or when a file cannot be copied into `OUT_DIR` or read.
#[must_use]
pub fn use_pregenerated(files: &[&str]) -> String {
    let dir = pregenerated_dir();
    for file in files {
        fs::copy(dir.join(file), out_dir().join(file))
            .expect("copy the checked-in bindings from src/pregenerated");
    }
    fs::read_to_string(dir.join(files[0])).expect("read the checked-in bindings")
}

/// Finds `lib` with pkg-config (emitting its link lines) and its headers,
/// and checks that bindgen can load libclang. Fails the build with an
/// install hint when something is missing.
///
/// # Panics
/// That is how the build fails: with the install hint as the message.
#[must_use]
pub fn probe(lib: &Library) -> Found {
    check_libclang(lib);
    let mut cfg = pkg_config::Config::new();
    cfg.cargo_metadata(true);
    if let Some(v) = lib.min_version {
        cfg.atleast_version(v);
    }
    let found = cfg.probe(lib.pkg).unwrap_or_else(|err| {
        let found = Command::new(env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".into()))
            .args(["--modversion", lib.pkg])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_else(|| "none".into());
        let required = lib
            .min_version
            .map(|v| format!(">= {v}"))
            .unwrap_or_else(|| "any version".into());
        fail(
            lib,
            &format!(
                "{pkg} was not found by pkg-config (found: {found}; required: {required}).\n\
                 Install the development package:\n  Debian/Ubuntu: apt-get install {deb} pkg-config\n  \
                 Fedora/RHEL:   dnf install {fed} pkgconf-pkg-config\n\
                 If it is installed under another prefix, add its lib/pkgconfig directory to \
                 PKG_CONFIG_PATH (now: {path:?}; PKG_CONFIG_LIBDIR: {libdir:?}).\n\
                 pkg-config said: {err}",
                pkg = lib.pkg,
                deb = lib.debian,
                fed = lib.fedora,
                path = env::var("PKG_CONFIG_PATH").unwrap_or_default(),
                libdir = env::var("PKG_CONFIG_LIBDIR").unwrap_or_default(),
            ),
        )
    });
    let mut dirs = found.include_paths.clone();
    if let Ok(dir) = pkg_config::get_variable(lib.pkg, "includedir") {
        dirs.push(PathBuf::from(dir));
    }
    for system in ["/usr/include", "/usr/local/include"] {
        dirs.push(PathBuf::from(system));
    }
    let mut include_dirs = Vec::new();
    for dir in dirs {
        if !include_dirs.contains(&dir) {
            include_dirs.push(dir);
        }
    }
    let headers = lib
        .headers
        .iter()
        .map(|h| {
            include_dirs
                .iter()
                .map(|d| d.join(h))
                .find(|p| p.exists())
                .unwrap_or_else(|| {
                    fail(
                        lib,
                        &format!(
                            "pkg-config found {} but not its header {h} (searched {include_dirs:?}).\n\
                             Install the development package: apt-get install {} (Debian/Ubuntu) or \
                             dnf install {} (Fedora/RHEL).",
                            lib.pkg, lib.debian, lib.fedora
                        ),
                    )
                })
        })
        .collect::<Vec<_>>();
    for h in &headers {
        println!("cargo:rerun-if-changed={}", h.display());
    }
    // The version the bindings come from, for the check that the checked-in
    // ones are current (tests/pregenerated.rs).
    println!(
        "cargo:rustc-env={}_PKG_VERSION={}",
        lib.prefix, found.version
    );
    Found {
        version: found.version,
        include_dirs,
        headers,
    }
}

/// Fails the build with a message that says what to install when libclang,
/// which bindgen loads at run time, is missing.
fn check_libclang(lib: &Library) {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let loaded = std::panic::catch_unwind(bindgen::clang_version);
    std::panic::set_hook(hook);
    if loaded.is_err() {
        fail(
            lib,
            "libclang was not found; bindgen needs it to read the installed headers.\n\
             Install it:\n  Debian/Ubuntu: apt-get install libclang-dev\n  \
             Fedora/RHEL:   dnf install clang-devel\n\
             or point LIBCLANG_PATH at the directory that holds libclang.so.",
        );
    }
}

/// Runs bindgen over `found`'s headers (through one umbrella header of
/// absolute paths, so that the shim includes exactly the headers the
/// bindings came from), writing the shim's C source to `OUT_DIR`.
/// `callbacks` types the macros.
///
/// # Panics
/// Outside a build script (no `OUT_DIR`), or when the umbrella header
/// cannot be written there. A failure of bindgen itself ends the build with
/// a message instead.
#[must_use]
pub fn generate(
    lib: &Library,
    found: &Found,
    callbacks: Box<dyn bindgen::callbacks::ParseCallbacks>,
) -> String {
    let out = out_dir();
    let umbrella = out.join("umbrella.h");
    let mut text = String::new();
    for h in &found.headers {
        writeln!(text, "#include \"{}\"", h.display()).unwrap();
    }
    fs::write(&umbrella, text).expect("write the umbrella header");
    let mut builder = bindgen::Builder::default()
        .header(umbrella.to_string_lossy())
        .clang_args(
            found
                .include_dirs
                .iter()
                .map(|d| format!("-I{}", d.display())),
        )
        .allowlist_function(lib.functions)
        .allowlist_type(lib.types)
        .allowlist_var(lib.vars)
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .translate_enum_integer_types(true)
        .clang_macro_fallback()
        .wrap_static_fns(true)
        .wrap_static_fns_path(out.join("shim"))
        .wrap_static_fns_suffix(lib.shim_suffix())
        .derive_default(true)
        .derive_debug(true)
        .layout_tests(false)
        .generate_comments(true)
        .use_core()
        .formatter(bindgen::Formatter::Prettyplease)
        .parse_callbacks(callbacks)
        .raw_line(format!(
            "#[allow(unused_imports)]\nuse libc::{{{}}};",
            LIBC_TYPES.join(", ")
        ));
    for ty in LIBC_TYPES {
        builder = builder.blocklist_type(ty);
    }
    let bindings = builder.generate().unwrap_or_else(|e| {
        fail(
            lib,
            &format!(
                "bindgen could not read the {} headers ({}): {e}",
                lib.pkg,
                lib.headers.join(", ")
            ),
        )
    });
    bindings.to_string()
}

/// Writes the generated `files` (name, text) to `OUT_DIR`, and, with
/// `<PREFIX>_REGENERATE` set, to `src/pregenerated/` with a `VERSION` file
/// naming the library version they come from.
///
/// # Panics
/// Outside a build script (no `OUT_DIR` or `CARGO_MANIFEST_DIR`), or when a
/// file cannot be written to `OUT_DIR` (or to `src/pregenerated/`).
pub fn write_bindings(lib: &Library, found: &Found, files: &[(&str, &str)]) {
    let out = out_dir();
    for (name, text) in files {
        fs::write(out.join(name), text).expect("write the bindings");
    }
    fs::write(
        out.join("pregenerated_check.rs"),
        PREGENERATED_CHECK
            .replace("PKG_NAME", lib.pkg)
            .replace("PKG_VERSION", &found.version)
            .replace("CRATE_NAME", lib.crate_name)
            .replace("REGENERATE_VAR", &lib.regenerate_var())
            .replace(
                "FILE_NAMES",
                &files
                    .iter()
                    .map(|(name, _)| format!("{name:?}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
    )
    .expect("write the pregenerated check");
    if env::var_os(lib.regenerate_var()).is_some() {
        let dir = pregenerated_dir();
        fs::create_dir_all(&dir).expect("create src/pregenerated");
        for (name, text) in files {
            fs::write(dir.join(name), text).expect("write src/pregenerated");
        }
        fs::write(
            dir.join("VERSION"),
            format!("{} {}\n", lib.pkg, found.version),
        )
        .expect("write src/pregenerated/VERSION");
    }
}

/// The check that the checked-in bindings are the ones the headers they
/// name produce, completed by [`write_bindings`] and included by the
/// `-sys` crate's `tests/pregenerated.rs`.
const PREGENERATED_CHECK: &str = r#"
/// Panics unless `src/pregenerated/` holds exactly what this build
/// generated, from the library version `src/pregenerated/VERSION` names.
pub fn assert_pregenerated_current() {
    let manifest = ::std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = manifest.join("src/pregenerated");
    let recorded = ::std::fs::read_to_string(dir.join("VERSION"))
        .expect("src/pregenerated/VERSION")
        .lines()
        .find_map(|l| Some(l.strip_prefix("PKG_NAME ")?.to_string()))
        .expect("src/pregenerated/VERSION names a PKG_NAME version");
    assert_eq!(
        "PKG_VERSION", recorded,
        "the checked-in bindings come from PKG_NAME {recorded}, the installed headers are          PKG_VERSION: run this check against {recorded}, or regenerate them with          `REGENERATE_VAR=1 cargo build -p CRATE_NAME`"
    );
    let names: &[&str] = &[FILE_NAMES];
    for name in names {
        let generated = ::std::fs::read_to_string(
            ::std::path::Path::new(env!("OUT_DIR")).join(name),
        )
        .expect("the generated bindings");
        let checked_in = ::std::fs::read_to_string(dir.join(name))
            .unwrap_or_else(|e| panic!("src/pregenerated/{name} is missing: {e}"));
        assert!(
            generated == checked_in,
            "src/pregenerated/{name} differs from what PKG_NAME PKG_VERSION's headers produce;              refresh it with `REGENERATE_VAR=1 cargo build -p CRATE_NAME`"
        );
    }
    println!("compared the checked-in bindings with PKG_NAME PKG_VERSION's headers: identical");
}
"#;

/// Compiles the shim that [`generate`] wrote and the ABI probe into one
/// archive linked into the crate, and writes the Rust side of the ABI
/// check (`abi_check.rs` in `OUT_DIR`, included by `tests/abi.rs`).
///
/// # Panics
/// Outside a build script (no `OUT_DIR`), when `bindings` is not the Rust
/// source [`generate`] returns, when a file cannot be written to `OUT_DIR`,
/// or when the C compiler fails.
pub fn compile(lib: &Library, found: &Found, bindings: &str) {
    let out = out_dir();
    let sym = lib.symbol_prefix();
    let (abi_c, abi_rs) = abi_tables(lib, bindings);
    let mut includes = String::new();
    for h in &found.headers {
        writeln!(includes, "#include \"{}\"", h.display()).unwrap();
    }
    // The probe is an object of its own in the archive, so only the ABI
    // test, which references it, links it in.
    let probe_c = out.join("abi_probe.c");
    fs::write(
        &probe_c,
        format!(
            "#include <stddef.h>\n{includes}\n\
             struct {sym}_abi_entry {{ const char *ty; const char *field; size_t offset; size_t size; }};\n\
             const struct {sym}_abi_entry {sym}_abi_table[] = {{\n{abi_c}}};\n\
             const size_t {sym}_abi_table_len = sizeof({sym}_abi_table) / sizeof({sym}_abi_table[0]);\n"
        ),
    )
    .expect("write the ABI probe");
    fs::write(
        out.join("abi_check.rs"),
        ABI_CHECK
            .replace("SYMBOL_PREFIX", &sym)
            .replace("RUST_TABLE", &abi_rs),
    )
    .expect("write the ABI check");

    let mut shim = cc::Build::new();
    shim.warnings(false).file(out.join("shim.c")).file(&probe_c);
    for dir in &found.include_dirs {
        shim.include(dir);
    }
    shim.compile(&format!("{sym}_shim"));
}

/// The Rust side of the ABI check, completed by [`compile`]: the Rust
/// table, the C table's symbols and the comparison.
const ABI_CHECK: &str = r#"
/// One row of the ABI table: a type's size (empty field), or a field's
/// offset and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AbiEntry {
    /// The C type's tag.
    pub ty: &'static str,
    /// The field, or empty for the type's own size.
    pub field: &'static str,
    /// The field's offset (0 for the type's row).
    pub offset: usize,
    /// The field's or the type's size.
    pub size: usize,
}

#[repr(C)]
struct CAbiEntry {
    ty: *const ::core::ffi::c_char,
    field: *const ::core::ffi::c_char,
    offset: usize,
    size: usize,
}

extern "C" {
    static SYMBOL_PREFIX_abi_table: [CAbiEntry; 0];
    static SYMBOL_PREFIX_abi_table_len: usize;
}

fn field_size<T, F>(_: fn(*const T) -> *const F) -> usize {
    ::core::mem::size_of::<F>()
}

/// The table as Rust lays the bindings out.
pub fn rust_table() -> Vec<AbiEntry> {
    vec![
RUST_TABLE    ]
}

/// The table as the C compiler lays the headers out.
pub fn c_table() -> Vec<AbiEntry> {
    // SAFETY: the probe, compiled by the build script against the same
    // headers, defines the table as a const array of `_len` entries whose
    // strings are literals (static, NUL-terminated).
    unsafe {
        let len = SYMBOL_PREFIX_abi_table_len;
        let base = SYMBOL_PREFIX_abi_table.as_ptr();
        (0..len)
            .map(|i| {
                let e = &*base.add(i);
                let text = |p| {
                    let s = ::core::ffi::CStr::from_ptr(p).to_str().expect("ASCII names");
                    &*Box::leak(s.to_owned().into_boxed_str())
                };
                AbiEntry { ty: text(e.ty), field: text(e.field), offset: e.offset, size: e.size }
            })
            .collect()
    }
}

/// Compares the two tables row by row and panics with every mismatch.
pub fn assert_tables_match() {
    let rust = rust_table();
    let c = c_table();
    assert_eq!(rust.len(), c.len(), "the two tables list the same rows");
    let mut mismatches = Vec::new();
    for (r, c) in rust.iter().zip(&c) {
        assert_eq!((r.ty, r.field), (c.ty, c.field), "rows in the same order");
        if (r.offset, r.size) != (c.offset, c.size) {
            mismatches.push(format!(
                "{}.{}: Rust offset {} size {}, C offset {} size {}",
                r.ty, r.field, r.offset, r.size, c.offset, c.size
            ));
        }
    }
    assert!(mismatches.is_empty(), "ABI mismatches:\n{}", mismatches.join("\n"));
    println!("{} rows compared with the C compiler: identical", rust.len());
}

/// Panics unless each of `types` has its size and at least one field in
/// the table: a table that silently lost a struct would prove nothing.
pub fn assert_covers(types: &[&str]) {
    let rust = rust_table();
    for ty in types {
        let rows = rust.iter().filter(|e| e.ty == *ty).count();
        assert!(rows >= 2, "{ty} is missing from the ABI table ({rows} rows)");
    }
}
"#;

/// The Rust and C rows for every struct and union the bindings define: one
/// row for its size and one per named field (offset and size), in the same
/// order in both tables.
fn abi_tables(lib: &Library, bindings: &str) -> (String, String) {
    let mut c = String::new();
    let mut rs = String::new();
    let file = syn::parse_file(bindings).expect("bindgen output parses");
    for item in &file.items {
        let (kind, ident, fields): (&str, String, Vec<(String, bool)>) = match item {
            syn::Item::Struct(s) => (
                "struct",
                s.ident.to_string(),
                match &s.fields {
                    syn::Fields::Named(n) => n
                        .named
                        .iter()
                        .map(|f| field_info(f.ident.as_ref().unwrap(), &f.ty))
                        .collect(),
                    _ => Vec::new(),
                },
            ),
            syn::Item::Union(u) => (
                "union",
                u.ident.to_string(),
                u.fields
                    .named
                    .iter()
                    .map(|f| field_info(f.ident.as_ref().unwrap(), &f.ty))
                    .collect(),
            ),
            _ => continue,
        };
        // Only C tags the headers name; bindgen's names for anonymous
        // members and opaque helper types have no C counterpart.
        if ident.contains("__bindgen") || ident.starts_with('_') {
            continue;
        }
        if !lib.abi_tags.iter().any(|p| ident.starts_with(p)) {
            continue;
        }
        if fields.is_empty() || (fields.len() == 1 && fields[0].0 == "_unused") {
            // Opaque (incomplete) types: nothing to compare.
            continue;
        }
        let cty = format!("{kind} {ident}");
        writeln!(c, "  {{\"{ident}\", \"\", 0, sizeof({cty})}},").unwrap();
        writeln!(
            rs,
            "        AbiEntry {{ ty: \"{ident}\", field: \"\", offset: 0, size: ::core::mem::size_of::<{ident}>() }},"
        )
        .unwrap();
        for (field, flexible) in fields {
            if field.starts_with("__bindgen") || field.starts_with("_bindgen") {
                continue;
            }
            let c_field = c_field_name(&field);
            let c_size = if flexible {
                "0".to_string()
            } else {
                format!("sizeof((({cty} *)0)->{c_field})")
            };
            writeln!(
                c,
                "  {{\"{ident}\", \"{c_field}\", offsetof({cty}, {c_field}), {c_size}}},"
            )
            .unwrap();
            let rs_size = if flexible {
                "0".to_string()
            } else {
                format!(
                    "field_size::<{ident}, _>(|p| {{\n            \
                     // SAFETY: never called; the closure only names the field's type.\n            \
                     unsafe {{ ::core::ptr::addr_of!((*p).{field}) }}\n        }})"
                )
            };
            writeln!(
                rs,
                "        AbiEntry {{ ty: \"{ident}\", field: \"{c_field}\", offset: ::core::mem::offset_of!({ident}, {field}), size: {rs_size} }},"
            )
            .unwrap();
        }
    }
    (c, rs)
}

fn field_info(ident: &syn::Ident, ty: &syn::Type) -> (String, bool) {
    let flexible = match ty {
        syn::Type::Path(p) => p
            .path
            .segments
            .iter()
            .any(|s| s.ident == "__IncompleteArrayField"),
        _ => false,
    };
    (ident.to_string(), flexible)
}

/// bindgen appends `_` to C field names that are Rust keywords.
fn c_field_name(rust: &str) -> String {
    const KEYWORDS: &[&str] = &[
        "type", "match", "ref", "mod", "fn", "loop", "move", "impl", "self", "crate", "use",
        "where", "async", "await", "dyn", "box", "in", "priv", "final", "macro", "override",
        "virtual", "yield", "abstract", "become", "do", "typeof", "unsized", "try",
    ];
    match rust.strip_suffix('_') {
        Some(stripped) if KEYWORDS.contains(&stripped) => stripped.to_string(),
        _ => rust.to_string(),
    }
}

/// The `#define` names of `header` that start with `prefix` and take no
/// arguments.
pub fn defined_names(header: &Path, prefix: &str) -> BTreeSet<String> {
    let text = fs::read_to_string(header).unwrap_or_default();
    text.lines()
        .filter_map(|l| l.trim_start().strip_prefix('#'))
        .filter_map(|l| l.trim_start().strip_prefix("define"))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(prefix) && !n.contains('('))
        .map(str::to_string)
        .collect()
}

/// Fails the build with `message`, its first line also as a cargo warning.
pub fn fail(lib: &Library, message: &str) -> ! {
    eprintln!("\nerror: {}: {message}\n", lib.crate_name);
    println!(
        "cargo:warning={}: {}",
        lib.crate_name,
        message.lines().next().unwrap_or("")
    );
    exit(1);
}

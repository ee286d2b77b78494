//! Generates the bindings from the headers installed on this machine.
//!
//! For each enabled feature (`fabric`, `verbs`) this script
//! 1. finds the library with pkg-config, failing with an install hint,
//! 2. runs bindgen over the installed headers, and lets bindgen write a C
//!    shim for every `static inline` function (`wrap_static_fns`),
//! 3. compiles that shim with `cc` against the same headers,
//! 4. writes a C and a Rust table of the size and field offsets of every
//!    struct and union, which `tests/abi.rs` compares.
//!
//! With `DOCS_RS` set, nothing is probed, generated or linked: the checked-in
//! bindings under `src/pregenerated/` are used. They are refreshed with
//! `LIBFABRIC_SYS_REGENERATE=1 cargo build -p libfabric-sys`.

use std::collections::BTreeSet;
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{exit, Command};

/// Suffix of every shim symbol, so that it never clashes with another crate.
const SHIM_SUFFIX: &str = "__libfabric_sys_shim";

/// Oldest libfabric the bindings support.
const MIN_LIBFABRIC: &str = "1.17";

/// One native library: the feature that enables it and what it needs.
struct Library {
    /// Cargo feature and Rust module name.
    name: &'static str,
    /// pkg-config package.
    pkg: &'static str,
    /// Minimum version, if any.
    min_version: Option<&'static str>,
    /// Debian/Ubuntu and Fedora/RHEL development packages.
    debian: &'static str,
    fedora: &'static str,
    /// Headers, relative to an include directory.
    headers: &'static [&'static str],
    /// bindgen allowlists.
    functions: &'static str,
    types: &'static str,
    vars: &'static str,
}

const FABRIC: Library = Library {
    name: "fabric",
    pkg: "libfabric",
    min_version: Some(MIN_LIBFABRIC),
    debian: "libfabric-dev",
    fedora: "libfabric-devel",
    headers: &[
        "rdma/fabric.h",
        "rdma/fi_errno.h",
        "rdma/fi_domain.h",
        "rdma/fi_eq.h",
        "rdma/fi_cm.h",
        "rdma/fi_endpoint.h",
        "rdma/fi_rma.h",
        "rdma/fi_tagged.h",
    ],
    functions: "fi_.*",
    types: "fi_.*|fid.*",
    vars: "FI_.*",
};

const VERBS: Library = Library {
    name: "verbs",
    pkg: "libibverbs",
    min_version: None,
    debian: "libibverbs-dev",
    fedora: "rdma-core-devel",
    headers: &["infiniband/verbs.h"],
    functions: "_*ibv_.*|verbs_.*",
    types: "_*ibv_.*|verbs_.*",
    vars: "IBV_.*",
};

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

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=DOCS_RS");
    println!("cargo:rerun-if-env-changed=LIBFABRIC_SYS_REGENERATE");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_LIBDIR");

    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let pregenerated = manifest.join("src/pregenerated");
    let libs: Vec<&Library> = [&FABRIC, &VERBS]
        .into_iter()
        .filter(|l| feature_enabled(l.name))
        .collect();

    if env::var_os("DOCS_RS").is_some() {
        // docs.rs has neither the libraries nor their headers: document the
        // checked-in bindings and link nothing.
        for lib in &libs {
            if lib.name == "fabric" {
                let text = fs::read_to_string(pregenerated.join("fabric.rs"))
                    .expect("read the checked-in bindings");
                publish_header_version(&text);
            }
            let mut files = vec![format!("{}.rs", lib.name)];
            if lib.name == "fabric" {
                files.push("fabric_errno.rs".into());
            }
            for file in files {
                fs::copy(pregenerated.join(&file), out.join(&file))
                    .expect("copy the checked-in bindings from src/pregenerated");
            }
        }
        return;
    }

    check_libclang();
    let regenerate = env::var_os("LIBFABRIC_SYS_REGENERATE").is_some();
    let mut shim = cc::Build::new();
    shim.warnings(false);
    let mut abi_c = String::new();
    let mut abi_rs = String::new();
    let mut abi_headers = String::new();

    let mut versions = String::new();
    for lib in &libs {
        let found = probe(lib);
        // The version the bindings come from, for the check that the
        // checked-in ones are current (tests/pregenerated.rs).
        println!(
            "cargo:rustc-env=LIBFABRIC_SYS_{}_PKG_VERSION={}",
            lib.name.to_uppercase(),
            found.version
        );
        writeln!(versions, "{} {}", lib.pkg, found.version).unwrap();
        let include_dirs = include_dirs(lib, &found);
        let headers: Vec<PathBuf> = lib
            .headers
            .iter()
            .map(|h| locate_header(lib, h, &include_dirs))
            .collect();
        for h in &headers {
            println!("cargo:rerun-if-changed={}", h.display());
            writeln!(abi_headers, "#include \"{}\"", h.display()).unwrap();
        }
        // One umbrella header per library, by absolute paths, so the shim
        // bindgen writes includes exactly the headers the bindings came from.
        let umbrella = out.join(format!("{}_umbrella.h", lib.name));
        let mut text = String::new();
        for h in &headers {
            writeln!(text, "#include \"{}\"", h.display()).unwrap();
        }
        fs::write(&umbrella, text).expect("write umbrella header");

        let shim_c = out.join(format!("{}_shim", lib.name));
        let bindings = generate(lib, &umbrella, &include_dirs, &shim_c, &headers);
        let bindings_rs = out.join(format!("{}.rs", lib.name));
        fs::write(&bindings_rs, &bindings).expect("write bindings");
        if lib.name == "fabric" {
            publish_header_version(&bindings);
        }

        let errno = (lib.name == "fabric").then(|| errno_module(&headers, &bindings));
        if let Some(errno) = &errno {
            fs::write(out.join("fabric_errno.rs"), errno).expect("write errno");
        }

        if regenerate {
            fs::create_dir_all(&pregenerated).expect("create src/pregenerated");
            fs::write(pregenerated.join(format!("{}.rs", lib.name)), &bindings).unwrap();
            if let Some(errno) = &errno {
                fs::write(pregenerated.join("fabric_errno.rs"), errno).unwrap();
            }
        }

        shim.file(shim_c.with_extension("c"));
        for dir in &include_dirs {
            shim.include(dir);
        }
        abi_tables(lib, &bindings, &mut abi_c, &mut abi_rs);
    }

    if regenerate {
        fs::write(pregenerated.join("VERSION"), &versions).expect("write src/pregenerated/VERSION");
    }
    if libs.is_empty() {
        return;
    }

    // The ABI probe: sizes and offsets as this machine's C compiler lays them
    // out. It is an object of its own in the archive, so only the ABI test,
    // which references it, links it in.
    let probe_c = out.join("abi_probe.c");
    fs::write(
        &probe_c,
        format!(
            "#include <stddef.h>\n{abi_headers}\n\
             struct libfabric_sys_abi_entry {{ const char *ty; const char *field; size_t offset; size_t size; }};\n\
             const struct libfabric_sys_abi_entry libfabric_sys_abi_table[] = {{\n{abi_c}}};\n\
             const size_t libfabric_sys_abi_table_len = sizeof(libfabric_sys_abi_table) / sizeof(libfabric_sys_abi_table[0]);\n"
        ),
    )
    .expect("write abi probe");
    fs::write(out.join("abi_rust.rs"), format!("&[\n{abi_rs}]\n")).expect("write abi table");
    shim.file(&probe_c);
    shim.compile("libfabric_sys_shim");
    println!("cargo:shim_dir={}", out.display());
}

/// Hands the libfabric header version to the crates that depend on this
/// one (`DEP_FABRIC_HEADER_MAJOR` / `_MINOR` in their build scripts), so
/// that they can derive `cfg`s for items that exist in some versions only.
fn publish_header_version(bindings: &str) {
    let value = |name: &str| -> u32 {
        let key = format!("pub const {name}: u32 = ");
        bindings
            .lines()
            .find_map(|l| l.trim().strip_prefix(&key)?.strip_suffix(';')?.parse().ok())
            .unwrap_or_else(|| fail(&format!("{name} is missing from the fabric bindings")))
    };
    println!("cargo:header_major={}", value("FI_MAJOR_VERSION"));
    println!("cargo:header_minor={}", value("FI_MINOR_VERSION"));
}

fn feature_enabled(name: &str) -> bool {
    env::var_os(format!("CARGO_FEATURE_{}", name.to_uppercase())).is_some()
}

/// Fails the build with a message that says what to install when libclang,
/// which bindgen loads at run time, is missing.
fn check_libclang() {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let loaded = std::panic::catch_unwind(bindgen::clang_version);
    std::panic::set_hook(hook);
    if loaded.is_err() {
        fail(
            "libclang was not found; bindgen needs it to read the installed headers.\n\
             Install it:\n  Debian/Ubuntu: apt-get install libclang-dev\n  \
             Fedora/RHEL:   dnf install clang-devel\n\
             or point LIBCLANG_PATH at the directory that holds libclang.so.",
        );
    }
}

fn probe(lib: &Library) -> pkg_config::Library {
    let mut cfg = pkg_config::Config::new();
    cfg.cargo_metadata(true);
    if let Some(v) = lib.min_version {
        cfg.atleast_version(v);
    }
    match cfg.probe(lib.pkg) {
        Ok(found) => found,
        Err(err) => {
            let found =
                Command::new(env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".into()))
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
            fail(&format!(
                "{pkg} was not found by pkg-config (found: {found}; required: {required}).\n\
                 Install the development package:\n  Debian/Ubuntu: apt-get install {deb} pkg-config\n  \
                 Fedora/RHEL:   dnf install {fed} pkgconf-pkg-config\n\
                 If it is installed under another prefix, add its lib/pkgconfig directory to \
                 PKG_CONFIG_PATH (now: {path:?}; PKG_CONFIG_LIBDIR: {libdir:?}).\n\
                 To build without it, disable the `{feat}` feature of libfabric-sys.\n\
                 pkg-config said: {err}",
                pkg = lib.pkg,
                deb = lib.debian,
                fed = lib.fedora,
                path = env::var("PKG_CONFIG_PATH").unwrap_or_default(),
                libdir = env::var("PKG_CONFIG_LIBDIR").unwrap_or_default(),
                feat = lib.name,
            ))
        }
    }
}

fn include_dirs(lib: &Library, found: &pkg_config::Library) -> Vec<PathBuf> {
    let mut dirs = found.include_paths.clone();
    if let Ok(dir) = pkg_config::get_variable(lib.pkg, "includedir") {
        dirs.push(PathBuf::from(dir));
    }
    for system in ["/usr/include", "/usr/local/include"] {
        dirs.push(PathBuf::from(system));
    }
    let mut unique = Vec::new();
    for dir in dirs {
        if !unique.contains(&dir) {
            unique.push(dir);
        }
    }
    unique
}

fn locate_header(lib: &Library, header: &str, dirs: &[PathBuf]) -> PathBuf {
    dirs.iter()
        .map(|d| d.join(header))
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            fail(&format!(
                "pkg-config found {} but not its header {header} (searched {dirs:?}).\n\
                 Install the development package: apt-get install {} (Debian/Ubuntu) or \
                 dnf install {} (Fedora/RHEL).",
                lib.pkg, lib.debian, lib.fedora
            ))
        })
}

fn generate(
    lib: &Library,
    umbrella: &Path,
    include_dirs: &[PathBuf],
    shim: &Path,
    headers: &[PathBuf],
) -> String {
    let errno = headers
        .iter()
        .find(|h| h.ends_with("rdma/fi_errno.h"))
        .map(|h| defined_names(h))
        .unwrap_or_default();
    let mut builder = bindgen::Builder::default()
        .header(umbrella.to_string_lossy())
        .clang_args(include_dirs.iter().map(|d| format!("-I{}", d.display())))
        .allowlist_function(lib.functions)
        .allowlist_type(lib.types)
        .allowlist_var(lib.vars)
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .translate_enum_integer_types(true)
        .clang_macro_fallback()
        .wrap_static_fns(true)
        .wrap_static_fns_path(shim)
        .wrap_static_fns_suffix(SHIM_SUFFIX)
        .derive_default(true)
        .derive_debug(true)
        .layout_tests(false)
        .generate_comments(true)
        .use_core()
        .formatter(bindgen::Formatter::Prettyplease)
        .parse_callbacks(Box::new(MacroTypes { errno }))
        .raw_line(format!(
            "#[allow(unused_imports)]\nuse libc::{{{}}};",
            LIBC_TYPES.join(", ")
        ));
    for ty in LIBC_TYPES {
        builder = builder.blocklist_type(ty);
    }
    let bindings = builder.generate().unwrap_or_else(|e| {
        fail(&format!(
            "bindgen could not read the {} headers ({}): {e}",
            lib.pkg,
            lib.headers.join(", ")
        ))
    });
    bindings.to_string()
}

/// Gives untyped `#define`s the types the C API uses them with, by rule
/// and value, never by a list of one version's names:
/// - the macros `rdma/fi_errno.h` defines are error codes, `c_int`;
/// - `FI_MR_*` that fit an `int` are `fi_domain_attr::mr_mode` bits, `c_int`;
///   a larger one (`FI_MR_DMABUF`, `1ULL << 40` in 1.22) is a 64-bit flag;
/// - any other `FI_*` is a capability, mode or operation flag, `u64`.
#[derive(Debug)]
struct MacroTypes {
    /// The macro names `rdma/fi_errno.h` defines.
    errno: BTreeSet<String>,
}

impl bindgen::callbacks::ParseCallbacks for MacroTypes {
    fn int_macro(&self, name: &str, value: i64) -> Option<bindgen::callbacks::IntKind> {
        use bindgen::callbacks::IntKind;
        if self.errno.contains(name) || name == "FI_SUCCESS" {
            return Some(IntKind::Int);
        }
        if name.ends_with("_VERSION") {
            return Some(IntKind::U32);
        }
        if name == "FI_SHARED_CONTEXT" {
            return Some(IntKind::Custom {
                name: "usize",
                is_signed: false,
            });
        }
        if name.starts_with("FI_MR_") && i32::try_from(value).is_ok() {
            // fi_domain_attr::mr_mode is an int.
            return Some(IntKind::Int);
        }
        if name.starts_with("FI_") {
            // Capability, mode, operation and completion flags: uint64_t.
            return Some(IntKind::U64);
        }
        None
    }
}

/// The `FI_*` macro names a header defines (`#define NAME`).
fn defined_names(header: &Path) -> BTreeSet<String> {
    let text = fs::read_to_string(header).unwrap_or_default();
    text.lines()
        .filter_map(|l| l.trim_start().strip_prefix('#'))
        .filter_map(|l| l.trim_start().strip_prefix("define"))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("FI_") && !n.contains('('))
        .map(str::to_string)
        .collect()
}

/// The error codes of fi_errno.h, all typed `c_int` as libfabric returns
/// them; the ones declared in an anonymous enum are re-typed here so that no
/// code ever has to name bindgen's `_bindgen_ty_N`.
fn errno_module(headers: &[PathBuf], bindings: &str) -> String {
    let errno_h = headers
        .iter()
        .find(|h| h.ends_with("rdma/fi_errno.h"))
        .expect("fi_errno.h is among the fabric headers");
    let text = fs::read_to_string(errno_h).expect("read fi_errno.h");
    let mut names = BTreeSet::new();
    for token in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        // Only names the bindings define: the header lists some in comments.
        let defined = bindings.contains(&format!("pub const {token}:"));
        if token.starts_with("FI_E")
            && token != "FI_ERRNO_H"
            && token != "FI_ERRNO_OFFSET"
            && defined
        {
            names.insert(token.to_string());
        }
    }
    let mut out = String::from(
        "/// Every error code of `rdma/fi_errno.h`, as the positive `c_int` that\n\
         /// libfabric calls return negated.\n\
         pub mod errno {\n",
    );
    for name in names {
        writeln!(
            out,
            "    #[allow(missing_docs)]\n    pub const {name}: ::core::ffi::c_int = super::{name} as ::core::ffi::c_int;"
        )
        .unwrap();
    }
    out.push_str("}\n");
    out
}

/// Appends, for every struct and union the bindings define, one row for its
/// size and one row per named field (offset and size) to the C table and the
/// Rust table, in the same order.
fn abi_tables(lib: &Library, bindings: &str, c: &mut String, rs: &mut String) {
    let file = syn::parse_file(bindings).expect("bindgen output parses");
    let module = lib.name;
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
        if ident.contains("__bindgen") || ident.starts_with("__") || ident.starts_with('_') {
            continue;
        }
        if !(ident.starts_with("fi_") || ident.starts_with("fid") || ident.starts_with("ibv_")) {
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
            "    AbiEntry {{ ty: \"{ident}\", field: \"\", offset: 0, size: ::core::mem::size_of::<{module}::{ident}>() }},"
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
                    "field_size::<{module}::{ident}, _>(|p| {{\n        \
                     // SAFETY: never called; the closure only names the field's type.\n        \
                     unsafe {{ ::core::ptr::addr_of!((*p).{field}) }}\n    }})"
                )
            };
            writeln!(
                rs,
                "    AbiEntry {{ ty: \"{ident}\", field: \"{c_field}\", offset: ::core::mem::offset_of!({module}::{ident}, {field}), size: {rs_size} }},"
            )
            .unwrap();
        }
    }
}

fn field_info(ident: &syn::Ident, ty: &syn::Type) -> (String, bool) {
    let ty_text = quote_type(ty);
    (
        ident.to_string(),
        ty_text.contains("__IncompleteArrayField"),
    )
}

fn quote_type(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(p) => p
            .path
            .segments
            .iter()
            .map(|s| s.ident.to_string())
            .collect::<Vec<_>>()
            .join("::"),
        _ => String::new(),
    }
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

fn fail(message: &str) -> ! {
    eprintln!("\nerror: libfabric-sys: {message}\n");
    println!(
        "cargo:warning=libfabric-sys: {}",
        message.lines().next().unwrap_or("")
    );
    exit(1);
}

//! Where a side's own instructions go: callgrind's count of each
//! instruction of the benchmark's own binary (the C baselines, the Rust
//! code and the libfabric call shims; the provider's code, in libfabric's
//! shared object, is left out), given to the source function it was
//! inlined from, as `addr2line` names it from the binary's line tables.
//!
//! An instruction inlined from the standard library goes to the innermost
//! frame of this workspace's code (or of libfabric's headers, whose inline
//! calls the C side makes) that it was inlined into.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

/// One source function's instructions per call.
pub struct Share {
    /// `function (file)`.
    pub place: String,
    pub per_call: f64,
}

/// The instructions of `exe`'s own code in a callgrind output written with
/// `--dump-instr=yes --compress-pos=no --compress-strings=no`, per source
/// function, per call (`calls` calls counted), largest first.
pub fn shares(callgrind_out: &str, exe: &Path, calls: u64) -> Result<Vec<Share>, String> {
    let costs = own_costs(callgrind_out, exe);
    if costs.is_empty() {
        return Err("callgrind counted no instruction of the benchmark's own code".into());
    }
    let mut addrs: Vec<u64> = costs.keys().copied().collect();
    addrs.sort_unstable();
    let frames = inline_frames(exe, &addrs)?;
    let mut by_place: HashMap<String, u64> = HashMap::new();
    for addr in &addrs {
        let place = frames
            .get(addr)
            .and_then(|f| place_of(f, false))
            .unwrap_or_else(|| format!("{addr:#x} (no source)"));
        *by_place.entry(place).or_default() += costs[addr];
    }
    let mut shares: Vec<Share> = by_place
        .into_iter()
        .map(|(place, n)| Share {
            place,
            per_call: n as f64 / calls as f64,
        })
        .collect();
    shares.sort_by(|a, b| {
        b.per_call
            .total_cmp(&a.per_call)
            .then(a.place.cmp(&b.place))
    });
    Ok(shares)
}

/// One instruction of the benchmark's own code, as `--listing` prints it.
pub struct Listed {
    pub addr: u64,
    pub per_call: f64,
    /// The instruction, as `objdump -d` writes it.
    pub text: String,
    /// `function (file:line)` of the frame it goes to (see [`shares`]).
    pub place: String,
}

/// Every instruction of `exe`'s own code run at least `min` times per
/// call, in address order: the annotation under [`shares`]'s sums.
pub fn listing(
    callgrind_out: &str,
    exe: &Path,
    calls: u64,
    min: f64,
) -> Result<Vec<Listed>, String> {
    let mut hot: Vec<(u64, f64)> = own_costs(callgrind_out, exe)
        .into_iter()
        .map(|(addr, n)| (addr, n as f64 / calls as f64))
        .filter(|&(_, per_call)| per_call >= min)
        .collect();
    hot.sort_unstable_by_key(|&(addr, _)| addr);
    let addrs: Vec<u64> = hot.iter().map(|&(addr, _)| addr).collect();
    let (Some(&first), Some(&last)) = (addrs.first(), addrs.last()) else {
        return Ok(Vec::new());
    };
    let frames = inline_frames(exe, &addrs)?;
    let texts = disassembly(exe, first, last)?;
    Ok(hot
        .into_iter()
        .map(|(addr, per_call)| Listed {
            addr,
            per_call,
            text: texts.get(&addr).cloned().unwrap_or_default(),
            place: frames
                .get(&addr)
                .and_then(|f| place_of(f, true))
                .unwrap_or_else(|| "(no source)".into()),
        })
        .collect())
}

/// Each instruction's text by address, from `objdump -d` of `exe` from
/// `first` to past `last` (an instruction is at most 15 bytes long).
fn disassembly(exe: &Path, first: u64, last: u64) -> Result<HashMap<u64, String>, String> {
    let out = Command::new("objdump")
        .args(["-d", "-C", "--no-show-raw-insn"])
        .arg(format!("--start-address={first:#x}"))
        .arg(format!("--stop-address={:#x}", last + 16))
        .arg(exe)
        .output()
        .map_err(|e| format!("objdump (apt-get install binutils): {e}"))?;
    if !out.status.success() {
        return Err(format!("objdump: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(instructions(&String::from_utf8_lossy(&out.stdout)))
}

/// The instructions of `objdump -d --no-show-raw-insn` output by address,
/// their text's runs of blanks made one space.
fn instructions(objdump: &str) -> HashMap<u64, String> {
    objdump
        .lines()
        .filter_map(|l| {
            let (addr, text) = l.trim_start().split_once(':')?;
            let addr = u64::from_str_radix(addr, 16).ok()?;
            Some((addr, text.split_whitespace().collect::<Vec<_>>().join(" ")))
        })
        .collect()
}

/// The self cost of each instruction of `exe`'s object: the cost lines of
/// its functions, without the inclusive cost line that follows a `calls=`
/// line.
fn own_costs(text: &str, exe: &Path) -> HashMap<u64, u64> {
    let exe = exe.to_string_lossy();
    let mut costs = HashMap::new();
    let (mut object, mut in_exe, mut after_calls) = (String::new(), false, false);
    // A cost line is the positions ("instr", maybe "line") then the events'
    // counts, Ir first (the only event callgrind counts here).
    let mut ir_field = 2;
    for line in text.lines() {
        if let Some(positions) = line.strip_prefix("positions:") {
            ir_field = positions.split_whitespace().count();
        } else if let Some(ob) = line.strip_prefix("ob=") {
            object = ob.to_string();
        } else if line.starts_with("fn=") {
            in_exe = object == exe;
        } else if line.starts_with("calls=") {
            after_calls = true;
        } else if let Some(rest) = line.strip_prefix("0x") {
            if std::mem::take(&mut after_calls) || !in_exe {
                continue;
            }
            // "ADDR [LINE] IR"
            let mut fields = rest.split_whitespace();
            let addr = fields.next().and_then(|a| u64::from_str_radix(a, 16).ok());
            let cost = fields.nth(ir_field - 1).and_then(|c| c.parse::<u64>().ok());
            if let (Some(addr), Some(cost)) = (addr, cost) {
                *costs.entry(addr).or_default() += cost;
            }
        }
    }
    costs
}

/// A source frame: its function and `file:line`.
struct Frame {
    function: String,
    location: String,
}

/// The inline frames of each address, innermost first (`addr2line -i`).
fn inline_frames(exe: &Path, addrs: &[u64]) -> Result<HashMap<u64, Vec<Frame>>, String> {
    let mut frames = HashMap::new();
    for chunk in addrs.chunks(512) {
        let out = Command::new("addr2line")
            .args(["-a", "-i", "-f", "-C", "-e"])
            .arg(exe)
            .args(chunk.iter().map(|a| format!("{a:#x}")))
            .output()
            .map_err(|e| format!("addr2line (apt-get install binutils): {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "addr2line: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines();
        let mut current: Option<u64> = None;
        while let Some(line) = lines.next() {
            if let Some(hex) = line.strip_prefix("0x") {
                current = u64::from_str_radix(hex, 16).ok();
                continue;
            }
            let (Some(addr), Some(location)) = (current, lines.next()) else {
                break;
            };
            frames.entry(addr).or_insert_with(Vec::new).push(Frame {
                function: line.to_string(),
                location: location.to_string(),
            });
        }
    }
    // "file:LINE" (with a discriminator after it, maybe), not "file:?" or
    // "??:0" (an address it could not place).
    let has_line = |f: &Frame| {
        !f.location.starts_with("??")
            && f.location
                .rsplit_once(':')
                .is_some_and(|(_, line)| line.starts_with(|c: char| c.is_ascii_digit()))
    };
    if !frames.values().flatten().any(has_line) {
        return Err("the benchmark has no debug information: build it with the \
                    workspace's release profile (debug = \"limited\")"
            .into());
    }
    Ok(frames)
}

/// Where an instruction goes: the innermost frame of this workspace's code
/// or of libfabric's headers, else the outermost frame, as `function
/// (file)`, or `function (file:line)` with `line`; `None` for an address
/// addr2line could not place.
fn place_of(frames: &[Frame], line: bool) -> Option<String> {
    let root = env!("CARGO_MANIFEST_DIR");
    let own = |f: &&Frame| {
        f.location.starts_with(root)
            || f.location.contains("/rdma/fi_")
            || f.location.contains("/libfabric-sys/")
    };
    let frame = frames.iter().find(own).or(frames.last())?;
    if frame.function.starts_with("??") {
        return None;
    }
    let file = frame.location.rsplit('/').next().unwrap_or("?");
    // "file:LINE (discriminator N)"; with no line ("file:?", line 0) the
    // file may be another frame's: the function alone says where.
    let file = match line {
        true => file.split(' ').next().unwrap_or(file),
        false => file.split(':').next().unwrap_or(file),
    };
    let name = short_name(&frame.function);
    if line && matches!(file.rsplit_once(':'), Some((_, "?" | "0"))) {
        return Some(name);
    }
    Some(format!("{name} ({file})"))
}

/// A function's path without its generic arguments, and only its last two
/// segments (`CompletionQueue::read`); a trait method as its type's
/// (`Completions::drop`).
fn short_name(function: &str) -> String {
    // "<path::Type<T> as path::Trait>::method": the type's path, then the
    // method.
    let function = function.replace("->", "");
    // "path::<impl Type<T>>::method": the type the impl block is of.
    if let Some((_, imp)) = function.split_once("<impl ") {
        let ty: String = imp
            .chars()
            .take_while(|c| !matches!(c, '<' | '>' | ' '))
            .collect();
        let method = function.rsplit("::").next().unwrap_or("");
        if !ty.is_empty() && !method.contains('>') {
            let ty = ty.rsplit("::").next().unwrap_or(&ty);
            return format!("{ty}::{method}");
        }
    }
    let function = match function
        .strip_prefix('<')
        .and_then(|f| f.rsplit_once(" as "))
    {
        // The type of the outermost "as" (nested: the inner one's type,
        // with its own trait left in, cut below).
        Some((ty, rest)) => format!("{ty}::{}", rest.rsplit("::").next().unwrap_or(rest)),
        None => function,
    };
    let mut bare = String::with_capacity(function.len());
    let mut depth = 0usize;
    for c in function.chars() {
        match c {
            '<' => depth += 1,
            '>' => depth = depth.saturating_sub(1),
            _ if depth == 0 => bare.push(c),
            _ => {}
        }
    }
    let segments: Vec<&str> = bare.split("::").filter(|s| !s.is_empty()).collect();
    segments[segments.len().saturating_sub(2)..].join("::")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_loses_its_generics_and_its_crate_path() {
        assert_eq!(
            short_name("libfabric::cq::CompletionQueue<F,T>::finish_read"),
            "CompletionQueue::finish_read"
        );
        assert_eq!(
            short_name("<libfabric::cq::Completions<T> as core::ops::drop::Drop>::drop"),
            "Completions::drop"
        );
        assert_eq!(short_name("bl_rma_one"), "bl_rma_one");
        assert_eq!(
            short_name("<<a::A as b::B>::C as d::D>::e"),
            "C::e",
            "the outermost trait's method, of the inner projection"
        );
        assert_eq!(
            short_name("libfabric::ep::rma::<impl libfabric::ep::Endpoint<T>>::check_rma"),
            "Endpoint::check_rma",
            "a method of an inherent impl in another module"
        );
        assert_eq!(
            short_name("x::run::<impl Fn() -> u32>"),
            "x::run",
            "an arrow in the generics"
        );
    }

    #[test]
    fn an_instruction_is_found_by_its_address() {
        let text = "\
/x/bench:     file format elf64-x86-64

Disassembly of section .text:

0000000000080d40 <bench::micro::RmaPairs::run+0xfa0>:
   80d40:\tmovzbl 0x3f(%rsp),%r13d
   80d46:\tlock incq  0x58(%r12)
";
        let found = instructions(text);
        assert_eq!(found.len(), 2, "labels and headers are no instructions");
        assert_eq!(found[&0x80d40], "movzbl 0x3f(%rsp),%r13d");
        assert_eq!(found[&0x80d46], "lock incq 0x58(%r12)");
    }

    #[test]
    fn only_the_self_cost_of_the_exes_own_functions_counts() {
        let text = "\
positions: instr line
events: Ir
ob=/x/bench
fn=f
0x10 1 3
calls=1 0x20
0x11 1 500
0x12 1 2
ob=/usr/lib/libfabric.so
fn=g
0x10 1 7
ob=/x/bench
fn=h
0x10 1 4
";
        let costs = own_costs(text, Path::new("/x/bench"));
        assert_eq!(costs.get(&0x10), Some(&7));
        assert_eq!(costs.get(&0x11), None, "the call's inclusive cost");
        assert_eq!(costs.get(&0x12), Some(&2));
        // Without line numbers in the positions.
        let text = "positions: instr\nob=/x/bench\nfn=f\n0x10 5\n";
        assert_eq!(own_costs(text, Path::new("/x/bench")).get(&0x10), Some(&5));
    }
}

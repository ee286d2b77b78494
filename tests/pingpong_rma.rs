//! The pingpong example's RMA modes (`-o write|read|writedata`), run as
//! the benchmark runs the example (`bench pingpong ARGS`, the code of
//! `examples/pingpong.rs`), server and client in one process over
//! 127.0.0.1: each must succeed and print a sane table.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const SIZES: [usize; 4] = [1, 64, 4096, 65536];
const ITERS: usize = 50;

fn pingpong(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bench"))
        .arg("pingpong")
        .args(args)
        .output()
        .expect("the bench binary runs")
}

/// One row of the table: bytes, iterations, MB/s, usec/xfer, Mxfers/s.
struct Row {
    size: usize,
    iters: usize,
    mb: f64,
    usec: f64,
    mxfers: f64,
}

fn size_of(text: &str) -> usize {
    let (num, mult) = match text.chars().last() {
        Some('k') => (&text[..text.len() - 1], 1 << 10),
        Some('m') => (&text[..text.len() - 1], 1 << 20),
        _ => (text, 1),
    };
    (num.parse::<f64>().expect("a size") * mult as f64) as usize
}

fn rows(stdout: &str) -> Vec<Row> {
    let mut lines = stdout.lines().skip_while(|l| !l.starts_with("bytes"));
    assert!(lines.next().is_some(), "no table in:\n{stdout}");
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(cols.len(), 8, "a table row of 8 columns: {l:?}");
            Row {
                size: size_of(cols[0]),
                iters: cols[1].parse().expect("iterations"),
                mb: cols[5].parse().expect("MB/s"),
                usec: cols[6].parse().expect("usec/xfer"),
                mxfers: cols[7].parse().expect("Mxfers/s"),
            }
        })
        .collect()
}

fn run_ok(provider: &str, ep: &str, op: &str) {
    let sizes = SIZES.map(|s| s.to_string()).join(",");
    let iters = ITERS.to_string();
    let out = pingpong(&[
        "-p", provider, "-e", ep, "-o", op, "-S", &sizes, "-I", &iters,
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "-p {provider} -e {ep} -o {op} failed: {}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains(&format!("RMA {op}")),
        "the banner names the op:\n{stdout}"
    );
    let rows = rows(&stdout);
    assert_eq!(rows.len(), SIZES.len(), "one row per size:\n{stdout}");
    for (row, &size) in rows.iter().zip(&SIZES) {
        assert_eq!(row.size, size, "{stdout}");
        assert_eq!(row.iters, ITERS, "{stdout}");
        assert!(
            row.usec > 0.0 && row.usec < 1e6,
            "usec/xfer of {size} bytes: {}\n{stdout}",
            row.usec
        );
        // MB/s is bytes per microsecond of the transfers counted.
        if row.mb > 0.0 && size >= 4096 {
            let mb = size as f64 / row.usec;
            assert!(
                (row.mb - mb).abs() <= mb * 0.05 + 0.02,
                "MB/s {} against {mb} from usec/xfer\n{stdout}",
                row.mb
            );
        }
        // Mxfers/s is 1 / usec/xfer (printed rounded).
        assert!(
            (row.mxfers - 1.0 / row.usec).abs() <= 0.011,
            "Mxfers/s {} against usec/xfer {}\n{stdout}",
            row.mxfers,
            row.usec
        );
    }
}

#[test]
fn write_rxm() {
    run_ok("tcp;ofi_rxm", "rdm", "write");
}

#[test]
fn writedata_rxm() {
    run_ok("tcp;ofi_rxm", "rdm", "writedata");
}

#[test]
fn read_rxm() {
    run_ok("tcp;ofi_rxm", "rdm", "read");
}

#[test]
fn write_rxd() {
    run_ok("udp;ofi_rxd", "rdm", "write");
}

#[test]
fn writedata_rxd() {
    run_ok("udp;ofi_rxd", "rdm", "writedata");
}

#[test]
fn read_rxd() {
    run_ok("udp;ofi_rxd", "rdm", "read");
}

#[test]
fn every_op_msg_tcp() {
    for op in ["write", "writedata", "read"] {
        run_ok("tcp", "msg", op);
    }
}

#[test]
fn every_op_shm() {
    for op in ["write", "writedata", "read"] {
        run_ok("shm", "rdm", op);
    }
}

#[test]
fn verify_every_message() {
    for op in ["write", "writedata", "read"] {
        let out = pingpong(&[
            "-p",
            "tcp;ofi_rxm",
            "-e",
            "rdm",
            "-o",
            op,
            "-S",
            "1,100,70000",
            "-I",
            "20",
            "-v",
        ]);
        assert!(
            out.status.success(),
            "-o {op} -v: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(rows(&String::from_utf8_lossy(&out.stdout)).len(), 3);
    }
}

#[test]
fn bad_command_lines() {
    for (args, says) in [
        (&["-o", "fetch"][..], "unknown RMA op"),
        (&["-o", "write", "-S", "0,64"][..], "at least 1 byte"),
        (&["-o", "read", "-c", "sread"][..], "busy-poll"),
    ] {
        let out = pingpong(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    // -S all leaves out the 0-byte size in RMA runs.
    let out = pingpong(&[
        "-p",
        "tcp;ofi_rxm",
        "-e",
        "rdm",
        "-o",
        "write",
        "-S",
        "all",
        "-I",
        "2",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let rows = rows(&stdout);
    assert_eq!(rows.first().map(|r| r.size), Some(1), "{stdout}");
}

/// A server and a client run with different `-o`: the server says so and
/// both fail.
#[test]
fn ops_must_match() {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
        .to_string();
    let common = ["-p", "tcp;ofi_rxm", "-e", "rdm", "-S", "64", "-I", "5"];
    let mut server = Command::new(env!("CARGO_BIN_EXE_bench"))
        .arg("pingpong")
        .args(common)
        .args(["-o", "write", "-P", &port, "-s", "127.0.0.1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the server starts");
    let mut err = BufReader::new(server.stderr.take().expect("stderr"));
    let mut said = String::new();
    let start = Instant::now();
    while !said.contains("waiting for a client") {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap_or(0) == 0 || start.elapsed() > Duration::from_secs(30) {
            let _ = server.kill();
            panic!("the server did not start listening: {said}");
        }
        said.push_str(&line);
    }
    let client = pingpong(&[&common[..], &["-o", "read", "-P", &port, "127.0.0.1"]].concat());
    let status = server.wait().expect("the server ends");
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut err, &mut rest);
    assert!(!client.status.success(), "the client failed");
    assert_eq!(status.code(), Some(1), "the server failed: {rest}");
    assert!(
        rest.contains("the client runs read, this server write"),
        "server: {rest}"
    );
}

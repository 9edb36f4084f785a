//! Plumbing for [`NodeConfig::fake_clock`](crate::NodeConfig::fake_clock):
//! libfaketime preloaded into the server, which reads the node's clock
//! offset from a file in the node's directory on every wall-clock read, so
//! the test moves the server's clock by rewriting that file.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// The file in a node's directory holding its offset in libfaketime's
/// syntax (`+SECONDS`). It lives as long as the directory, so a restarted
/// server keeps the offset.
pub(crate) const OFFSET_FILE: &str = "faketime.rc";

/// The preload library's file name in every libfaketime package.
const LIBRARY: &str = "libfaketime.so.1";

/// The path of `libfaketime.so.1`; panics naming the package if it is missing.
pub(crate) fn library() -> &'static Path {
    static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
    FOUND
        .get_or_init(find_library)
        .as_deref()
        .unwrap_or_else(|| {
            panic!(
                "NodeConfig::fake_clock needs libfaketime ({LIBRARY} in a faketime/ \
             directory under /usr/lib/<multiarch>, /usr/lib64, /usr/lib or \
             /usr/local/lib): install the `faketime` package \
             (`apt-get install -y faketime` on Debian/Ubuntu)"
            )
        })
}

fn find_library() -> Option<PathBuf> {
    // Debian and Ubuntu: /usr/lib/<multiarch>/faketime/; Fedora and
    // openSUSE: /usr/lib64/faketime/; Arch: /usr/lib/faketime/; upstream's
    // `make install`: /usr/local/lib/faketime/. This machine's multiarch
    // name first, then any other one present (e.g. arm-linux-gnueabihf).
    let mut dirs: Vec<PathBuf> = vec![
        Path::new("/usr/lib").join(format!("{}-linux-gnu", std::env::consts::ARCH)),
        "/usr/lib64".into(),
        "/usr/lib".into(),
        "/usr/local/lib".into(),
    ];
    if let Ok(entries) = fs::read_dir("/usr/lib") {
        let mut multiarch: Vec<PathBuf> = entries
            .flatten()
            .filter(|entry| entry.file_name().to_string_lossy().contains("-linux-"))
            .map(|entry| entry.path())
            .collect();
        multiarch.sort();
        dirs.extend(multiarch);
    }
    dirs.iter()
        .map(|dir| dir.join("faketime").join(LIBRARY))
        .find(|path| path.is_file())
}

/// Writes `offset` to the node's offset file, atomically: libfaketime
/// reopens the file on every clock read, and must never see it half written.
pub(crate) fn write_offset(dir: &Path, offset: Duration) -> io::Result<()> {
    let staged = dir.join(format!("{OFFSET_FILE}.new"));
    // Seconds with a '.' fraction: libfaketime parses it with atof, and the
    // servers never change LC_NUMERIC from "C". No letter may appear: an
    // 'm', 'h', 'd' or 'y' anywhere would scale the number.
    let text = format!("+{}.{:09}\n", offset.as_secs(), offset.subsec_nanos());
    fs::write(&staged, text)?;
    fs::rename(&staged, dir.join(OFFSET_FILE))
}

/// Makes `cmd` run under `library` with the offset in `dir`'s offset file.
pub(crate) fn configure(cmd: &mut Command, dir: &Path, library: &Path) {
    // Inherited libfaketime settings (say, tests run under `faketime`) would
    // override ours: FAKETIME wins over the file, FAKETIME_SHARED syncs with
    // another process.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("FAKETIME") {
            cmd.env_remove(name);
        }
    }
    // libc.so.6 right after libfaketime makes glibc's malloc win over a
    // libjemalloc the server links (Debian's redis-server does). Otherwise
    // the server hangs at startup: jemalloc reads the clock while it
    // initializes, libfaketime initializes on that first read, and its
    // failed dlsym lookups allocate, back into jemalloc's unfinished init
    // (wolfcw/libfaketime#130). glibc's malloc reads no clock. libfaketime's
    // dlsym(RTLD_NEXT) still finds libc after it, and jemalloc-only calls
    // (mallctl, for INFO) still reach jemalloc, once libfaketime is up.
    let mut preload = OsString::from(library);
    preload.push(":libc.so.6");
    if let Some(inherited) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(inherited);
    }
    cmd.env("LD_PRELOAD", preload)
        .env("FAKETIME_TIMESTAMP_FILE", dir.join(OFFSET_FILE))
        // Reread the file on every clock read (by default it is cached for
        // 10 s), so a jump applies to the very next command.
        .env("FAKETIME_NO_CACHE", "1")
        // Only the wall clock moves. Faked, CLOCK_MONOTONIC would become
        // wall time plus the offset: the event loop's timers and anything
        // else measured on it would see the jumps too. The old name is for
        // libfaketime before 0.9.8.
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env("DONT_FAKE_MONOTONIC", "1");
}

/// Whether the process `pid` has libfaketime mapped: a statically linked
/// server ignores LD_PRELOAD, and its clock would silently never move.
pub(crate) fn loaded_in(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/maps"))
        .map(|maps| maps.contains(LIBRARY))
        .unwrap_or(false)
}

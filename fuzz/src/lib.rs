//! Shared by polycorn's fuzz targets (`fuzz_targets/`) and the seed generator
//! (`examples/seeds.rs`): a byte cursor, a heap counter for the memory bounds, and the input
//! format of the `session` target (docs/src/lab/fuzzing.md).

#![allow(clippy::new_without_default)]

pub mod alloc;
pub mod session;

/// Reads fixed-size fields from fuzz input; past the end every field reads as zero, so any byte
/// string is a valid input.
#[derive(Debug)]
pub struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Cursor { data, pos: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    pub fn u8(&mut self) -> u8 {
        match self.data.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => 0,
        }
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }

    /// Up to `n` bytes (fewer at the end of the input).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let start = self.pos.min(self.data.len());
        let end = start.saturating_add(n).min(self.data.len());
        self.pos = end;
        &self.data[start..end]
    }

    /// Everything not read yet.
    pub fn rest(&mut self) -> &'a [u8] {
        self.bytes(usize::MAX)
    }
}

/// Writes what [`Cursor`] reads (the seed generator builds inputs with it).
#[derive(Debug, Default)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    pub fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn bytes(&mut self, v: &[u8]) {
        self.0.extend_from_slice(v);
    }
}

/// Where targets that need files keep them: `$POLYCORN_FUZZ_TMP`, else `polycorn-fuzz` in
/// `/dev/shm` (memory: a file written per run costs 20 µs there, a millisecond on a disk), else
/// in the system's temporary directory.
pub fn scratch_dir() -> std::path::PathBuf {
    if let Some(dir) = std::env::var_os("POLYCORN_FUZZ_TMP") {
        return dir.into();
    }
    let shm = std::path::Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    base.join("polycorn-fuzz")
}

/// A directory of this process under [`scratch_dir`], removed when the process exits normally.
/// A process that crashed or was ended by libFuzzer (`_exit`) leaves its directory; the next
/// process removes those of processes that are gone.
pub fn process_dir(name: &str) -> std::path::PathBuf {
    static DIRS: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());
    extern "C" fn remove_dirs() {
        if let Ok(dirs) = DIRS.lock() {
            for d in dirs.iter() {
                let _ = std::fs::remove_dir_all(d);
            }
        }
    }
    let base = scratch_dir();
    if let Ok(entries) = std::fs::read_dir(&base) {
        for e in entries.flatten() {
            let file_name = e.file_name();
            let Some(pid) = file_name
                .to_str()
                .and_then(|n| n.strip_prefix(name))
                .and_then(|n| n.strip_prefix('-'))
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    let dir = base.join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let mut dirs = DIRS.lock().expect("not poisoned");
    if dirs.is_empty() {
        // SAFETY: registers a plain function without arguments to run at exit.
        unsafe {
            libc::atexit(remove_dirs);
        }
    }
    dirs.push(dir.clone());
    dir
}

//! Random numbers from the kernel's random source.

/// 64 random bits (session ids and epochs), from the kernel's random source.
pub fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .is_err()
    {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        return t.as_nanos() as u64 ^ u64::from(std::process::id());
    }
    u64::from_be_bytes(b)
}

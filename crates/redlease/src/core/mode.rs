//! [`LockMode`]: whether a lease holds a lock alone or shares it with
//! other readers.

/// How a [`Lease`](crate::Lease) holds its lock: alone, as a writer (what
/// [`Locker::lock`](crate::Locker::lock) and
/// [`Locker::write_lock`](crate::Locker::write_lock) take), or shared
/// with any number of other readers ([`Locker::read_lock`](crate::Locker::read_lock)).
/// Readers and a writer of one name exclude each other.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redlease::Error> {
/// # let nodes = redlease_testkit::RedisNodes::start(1);
/// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
/// let lease = locker.read_lock("catalog").await?;
/// assert_eq!(lease.mode(), redlease::LockMode::Shared);
/// # lease.release().await }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockMode {
    /// One writer, and nobody else.
    Exclusive,
    /// Readers, any number of them, and no writer.
    Shared,
}

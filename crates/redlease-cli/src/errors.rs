//! Errors as one line for people: the error and every cause behind it.

use std::error::Error;

/// The error's message followed by `: <cause>` for each
/// [`source`](Error::source) down the chain, so that a wrapper such as
/// `redlease::Error::WaitTimeout`, which keeps its last attempt's error only
/// as its source, does not hide why it failed. A cause whose text the line
/// already contains (an error that repeats its source in its own message)
/// is not added again.
pub fn chain(e: &dyn Error) -> String {
    let mut line = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        next = cause.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt;
    use std::io;

    /// An error with a fixed message and an optional cause.
    #[derive(Debug)]
    struct Wrapped(&'static str, Option<Box<dyn Error + 'static>>);

    impl fmt::Display for Wrapped {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl Error for Wrapped {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.1.as_deref()
        }
    }

    #[test]
    fn every_cause_follows_its_error() {
        let root = io::Error::new(io::ErrorKind::ConnectionRefused, "connection refused");
        let middle = Wrapped("acquire reached no quorum", Some(Box::new(root)));
        let top = Wrapped("gave up waiting for lock \"k\"", Some(Box::new(middle)));
        assert_eq!(
            chain(&top),
            "gave up waiting for lock \"k\": acquire reached no quorum: connection refused"
        );
    }

    #[test]
    fn an_error_without_a_source_is_its_message() {
        assert_eq!(chain(&Wrapped("bad input", None)), "bad input");
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let root = Wrapped("timed out", None);
        let top = Wrapped("node 1: timed out", Some(Box::new(root)));
        assert_eq!(chain(&top), "node 1: timed out");
    }
}

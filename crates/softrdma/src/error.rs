//! The one error type of the public API, mapped once to errno.

use softrdma_proto::VerbsError;
use std::io;

/// Why a softrdma call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A verb rejected its arguments or hit a limit.
    #[error("{0}")]
    Verbs(#[from] VerbsError),
    /// A socket or system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The connection setup exchange with the peer failed.
    #[error("connection setup: {0}")]
    Connect(#[from] ConnectError),
    /// The device's engine thread stopped.
    #[error("the device's engine has stopped")]
    EngineStopped,
    /// The configuration (a `SOFTRDMA_*` variable, the config file) is
    /// not usable; the message names the variable or line and what it
    /// accepts.
    #[error("configuration: {0}")]
    Config(#[from] softrdma_config::ConfigError),
    /// An argument is out of range (checked before reaching the core).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The call needs a privilege the process does not have (a
    /// controlled Q_Key without CAP_NET_RAW, as the kernel refuses it).
    #[error("permission denied: {0}")]
    Permission(String),
    /// An rdma_cm call failed with the errno librdmacm reports for it.
    #[error("{context}: {}", io::Error::from_raw_os_error(*errno))]
    Cm {
        /// The errno (EINVAL, EADDRINUSE, ETIMEDOUT, ECONNREFUSED …).
        errno: i32,
        /// What failed.
        context: String,
    },
}

impl Error {
    /// The errno libibverbs would report for this failure.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Verbs(v) => match v {
                VerbsError::InvalidArgument(_) | VerbsError::NoSuchObject => libc::EINVAL,
                // Providers report a full work queue as ENOMEM.
                VerbsError::NoMemory | VerbsError::QueueFull => libc::ENOMEM,
                VerbsError::Busy => libc::EBUSY,
                VerbsError::NotSupported => libc::EOPNOTSUPP,
                VerbsError::Fault => libc::EFAULT,
                VerbsError::PermissionDenied => libc::EPERM,
            },
            Error::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            Error::Connect(_) => libc::ECONNREFUSED,
            Error::EngineStopped => libc::ENODEV,
            Error::InvalidArgument(_) | Error::Config(_) => libc::EINVAL,
            Error::Permission(_) => libc::EPERM,
            Error::Cm { errno, .. } => *errno,
        }
    }

    pub(crate) fn cm(errno: i32, context: impl Into<String>) -> Error {
        Error::Cm {
            errno,
            context: context.into(),
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// Why the out-of-band connection exchange ([`crate::cm`]) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The peer closed the TCP connection.
    #[error("the peer closed the connection")]
    PeerClosed,
    /// The peer sent a line longer than the exchange allows.
    #[error("the peer sent an overlong line")]
    Overlong,
    /// The first line was not the count line.
    #[error("unexpected greeting from the peer: {0:?}")]
    Greeting(String),
    /// The QP lines were not UTF-8 text.
    #[error("the peer sent non-UTF-8 text")]
    NotUtf8,
    /// The peer sent another number of QP lines than its count line said.
    #[error("the peer announced {announced} QPs and sent {sent}")]
    Miscounted {
        /// The count line's number.
        announced: usize,
        /// The lines that came.
        sent: usize,
    },
    /// A QP line without softrdma's tag.
    #[error("the peer does not speak softrdma's exchange (got {0:?})")]
    NotSoftrdma(String),
    /// A QP line with a field that does not parse.
    #[error("peer sent a bad {what}: {line:?}")]
    BadField {
        /// Which field.
        what: &'static str,
        /// The line.
        line: String,
    },
    /// A barrier got something other than its byte.
    #[error("lost step with the peer")]
    LostStep,
    /// The peer's host name did not resolve.
    #[error("cannot resolve {addr}: {source}")]
    Resolve {
        /// What was given.
        addr: String,
        /// The resolver's error.
        source: io::Error,
    },
    /// Nobody accepted the connection before the deadline.
    #[error("cannot reach {addr}: {}", .last.as_ref().map_or_else(|| "no address".to_string(), |e| e.to_string()))]
    Unreachable {
        /// What was given.
        addr: String,
        /// The last attempt's error (`None`: the name had no address).
        last: Option<io::Error>,
    },
    /// The peer's exchange listed no QP.
    #[error("the peer offered no QP")]
    NoQp,
}

/// Result of the public API.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_at_the_boundary() {
        let v = |e: VerbsError| Error::from(e).errno();
        assert_eq!(v(VerbsError::InvalidArgument("x")), libc::EINVAL);
        assert_eq!(v(VerbsError::NoSuchObject), libc::EINVAL);
        assert_eq!(v(VerbsError::NoMemory), libc::ENOMEM);
        assert_eq!(v(VerbsError::QueueFull), libc::ENOMEM);
        assert_eq!(v(VerbsError::Busy), libc::EBUSY);
        assert_eq!(v(VerbsError::NotSupported), libc::EOPNOTSUPP);
        let closed = Error::from(ConnectError::PeerClosed);
        assert_eq!(closed.errno(), libc::ECONNREFUSED);
        assert_eq!(
            closed.to_string(),
            "connection setup: the peer closed the connection"
        );
        let io = Error::io("x", io::Error::from_raw_os_error(libc::EADDRINUSE));
        assert_eq!(io.errno(), libc::EADDRINUSE);
    }
}

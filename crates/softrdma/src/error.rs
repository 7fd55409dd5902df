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
    Connect(String),
    /// The device's engine thread stopped.
    #[error("the device's engine has stopped")]
    EngineStopped,
    /// An argument is out of range (checked before reaching the core).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
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
            Error::Verbs(v) => v.errno(),
            Error::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            Error::Connect(_) => libc::ECONNREFUSED,
            Error::EngineStopped => libc::ENODEV,
            Error::InvalidArgument(_) => libc::EINVAL,
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

/// Result of the public API.
pub type Result<T> = std::result::Result<T, Error>;

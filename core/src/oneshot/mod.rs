//! One-shot commands, sans-IO: what a client of its own sends besides a consumer's loop (an
//! inspection of a group, a producer's appends, a retirement, a search for streams) and what
//! the answers mean. The command line's `pending`, `produce`, `retire`, `demo` and
//! `--stream-pattern` speak to the servers through these pieces only, over a transport's
//! blocking session (`pelican_mio::Session`).
//!
//! - [`Request`]: a command, encoded by the core's encoder (a RESP array of bulk strings),
//!   made by a typed constructor ([`Request::xpending`], [`Request::xinfo_groups`],
//!   [`Request::wait`]…) or from its arguments ([`Request::new`]). [`Xadd`] encodes a
//!   producer's appends (`IDMP`, `MAXLEN`), a big value left out of the copy.
//! - [`Replies`]: incoming bytes split into whole [`Reply`]s. A reply says whether it is an
//!   error ([`Reply::error`]), a cluster redirect ([`Reply::redirect`]), and keeps its bytes
//!   for the core's other readers ([`Reply::as_bytes`]: [`read_node_role`](crate::locate::read_node_role),
//!   [`read_slot_map`](crate::cluster::read_slot_map), [`Retirement::read`](crate::retire::Retirement::read)).
//! - Typed readers of the answers, each taking either protocol: [`PendingSummary`],
//!   [`PendingEntry`], [`ConsumerInfo`], [`GroupInfo`] (and the check of its lag,
//!   `PROTOCOL.md` 20), [`StreamInfo`] (and a stream's `IDMP` window), [`StreamScan`] (a
//!   whole `SCAN … TYPE stream`), [`Hello`], [`ClientInfo`], [`read_count`],
//!   [`read_entry_ids`], [`Xadd::read_id`]. An error reply is [`ReplyError::Server`] with the
//!   server's text; a reply of another shape is [`ReplyError::Shape`], never a panic.
//!
//! ```
//! use pelican::oneshot::{PendingSummary, Replies, Request};
//!
//! let request = Request::xpending(b"orders", b"billing");
//! assert_eq!(request.as_bytes(), b"*3\r\n$8\r\nXPENDING\r\n$6\r\norders\r\n$7\r\nbilling\r\n");
//! // What the server answered, read as it came in.
//! let mut replies = Replies::new();
//! replies.extend(b"*4\r\n:2\r\n$3\r\n1-0\r\n$3\r\n2-0\r\n*1\r\n*2\r\n$1\r\nA\r\n$1\r\n2\r\n");
//! let reply = replies.next_reply()?.expect("a whole reply");
//! let summary = PendingSummary::read(&reply)?;
//! assert_eq!((summary.count, summary.consumers.len()), (2, 1));
//! # Ok::<(), pelican::oneshot::ReplyError>(())
//! ```

mod read;
mod reply;
mod request;
mod scan;
mod xadd;

pub use read::{
    read_count, read_entries, read_entry_ids, read_time, ClientInfo, ConsumerInfo, GroupInfo, Hello,
    IdmpWindow, PendingEntry, PendingSummary, RangeEntry, StreamInfo,
};
pub use reply::{Replies, Reply, ReplyError};
pub use request::Request;
pub use scan::StreamScan;
pub use xadd::Xadd;

#[cfg(test)]
mod tests;

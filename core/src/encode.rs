//! Commands on the wire: always arrays of bulk strings (never the inline form, which breaks on
//! arguments with spaces), appended straight into the consumer's one output buffer.

use bytes::{BufMut, BytesMut};

use crate::decimal::Decimal;

/// Appends one command made of `args` to `out`.
pub(crate) fn command(out: &mut BytesMut, args: &[&[u8]]) {
    header(out, b'*', args.len());
    for arg in args {
        bulk(out, arg);
    }
}

/// Appends one bulk string (an argument of a command begun with [`header`]).
pub(crate) fn bulk(out: &mut BytesMut, arg: &[u8]) {
    header(out, b'$', arg.len());
    out.put_slice(arg);
    out.put_slice(b"\r\n");
}

/// [`bulk`] into a plain `Vec` (the consumer's cache of its streams' keys).
pub(crate) fn bulk_vec(out: &mut Vec<u8>, arg: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(Decimal::new(arg.len() as u64).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(arg);
    out.extend_from_slice(b"\r\n");
}

/// Appends an array or bulk string header: `*<n>\r\n` or `$<n>\r\n`.
pub(crate) fn header(out: &mut BytesMut, kind: u8, n: usize) {
    out.put_u8(kind);
    out.put_slice(Decimal::new(n as u64).as_bytes());
    out.put_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_an_array_of_bulk_strings() {
        let mut out = BytesMut::new();
        command(&mut out, &[b"AUTH", b"us er", b"p\r\nw"]);
        assert_eq!(&out[..], b"*3\r\n$4\r\nAUTH\r\n$5\r\nus er\r\n$4\r\np\r\nw\r\n");
    }

    #[test]
    fn commands_append() {
        let mut out = BytesMut::new();
        command(&mut out, &[b"PING"]);
        command(&mut out, &[b""]);
        assert_eq!(&out[..], b"*1\r\n$4\r\nPING\r\n*1\r\n$0\r\n\r\n");
    }
}

//! Where the plain entries of a read reply lie in its frame, found by the decoder's scan as it
//! delimits the frame, so that the reply's walk ([`stream_reply`](crate::stream_reply)) need
//! not look again.

/// Where a plain entry (`*2 $id *2k ($f $v)…`, the shape servers send, or `*4 … :idle
/// :deliveries` from a read with `CLAIM`) lies in a frame. The decoder's scan finds them as it
/// delimits a read reply, so that the walk need not look again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    pub start: usize,
    pub id_at: usize,
    pub id_len: usize,
    pub fields_at: usize,
    pub pairs: usize,
    /// Where the fields end (the entry's end, but for a `CLAIM` read's two numbers).
    pub fields_end: usize,
    pub end: usize,
    /// A `CLAIM` read's idle time and delivery count before this delivery.
    pub claim: Option<(u64, u64)>,
}

/// The plain entry at `at`, if one is there whole (lengths and CRLFs checked); `None` for
/// anything else: another shape, or not all there yet.
#[inline]
pub(crate) fn plain_span(b: &[u8], at: usize) -> Option<Span> {
    let start = at + 4;
    let claimed = match b.get(at..start)? {
        b"*2\r\n" => false,
        b"*4\r\n" => true,
        _ => return None,
    };
    let (id_len, id_at, after_id) = bulk_at(b, start)?;
    if *b.get(after_id)? != b'*' {
        return None;
    }
    let (n, fields_at) = digits(b, after_id + 1)?;
    if n % 2 != 0 {
        return None;
    }
    let mut fields_end = fields_at;
    for _ in 0..n {
        fields_end = bulk_at(b, fields_end)?.2;
    }
    let (mut end, mut claim) = (fields_end, None);
    if claimed {
        // `:<digits>` that fit an i64 (as `redis-protocol` reads numbers); anything else is
        // left to the general path.
        let number = |at: usize| {
            let (_, next) = (*b.get(at)? == b':').then(|| digits(b, at + 1)).flatten()?;
            let n = std::str::from_utf8(&b[at + 1..next - 2]).ok()?.parse::<i64>().ok()?;
            Some((n as u64, next))
        };
        let (idle, at) = number(end)?;
        let (before, at) = number(at)?;
        (end, claim) = (at, Some((idle, before)));
    }
    Some(Span { start: at, id_at, id_len, fields_at, pairs: n / 2, fields_end, end, claim })
}

/// A whole bulk string at `at`: its length, where its bytes start, where the next value starts.
#[inline]
fn bulk_at(b: &[u8], at: usize) -> Option<(usize, usize, usize)> {
    if *b.get(at)? != b'$' {
        return None;
    }
    let (n, data) = digits(b, at + 1)?;
    let next = data.checked_add(n)?.checked_add(2)?;
    (b.get(next - 2..next)? == b"\r\n").then_some((n, data, next))
}

/// A run of decimal digits and CRLF at `at`: the number and where the next line starts.
#[inline]
fn digits(b: &[u8], at: usize) -> Option<(usize, usize)> {
    let mut i = at;
    let mut n = 0usize;
    while let Some(&c) = b.get(i) {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        n = n.wrapping_mul(10).wrapping_add(usize::from(d));
        i += 1;
    }
    (i > at && i - at <= 19 && b.get(i..i + 2) == Some(b"\r\n")).then_some((n, i + 2))
}

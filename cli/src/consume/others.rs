//! The guard of `--delete-acked keepref|delref`: acks that delete entries whatever other
//! groups have read would take from those groups everything they have not read yet, so the
//! stream's other groups are looked for before anything is read, and their presence refuses
//! the start unless `--force-delete`.

use pelican::oneshot::{GroupInfo, Request};

use crate::failure::Failure;
use crate::name::show;
use crate::server::Server;

/// `Err` naming the other groups of any of `streams` (`XINFO GROUPS`), or that they could
/// not be looked for. A stream that does not exist yet has none.
pub fn refuse_other_groups(
    server: &Server,
    streams: &[&[u8]],
    group: &[u8],
    when: &str,
) -> Result<(), Failure> {
    let cannot = |e: String| {
        Failure::Failed(format!(
            "cannot look for the streams' other groups, which --delete-acked {when} would take \
             entries from: {e} (--force-delete starts without looking)"
        ))
    };
    let mut session = server.connect("pelican:delete-acked-check").map_err(cannot)?;
    for stream in streams {
        let groups = match session.call(&Request::xinfo_groups(stream)) {
            Ok(reply) => GroupInfo::read_all(&reply).map_err(|e| cannot(e.to_string()))?,
            // A stream that does not exist yet has none (PROTOCOL.md 46).
            Err(e) if e.server_text().is_some_and(|t| t.to_ascii_lowercase().contains("no such key")) => {
                continue
            }
            Err(e) => return Err(cannot(server.said(e))),
        };
        let others: Vec<String> = groups
            .iter()
            .map(|g| &g.name[..])
            .filter(|name| *name != group)
            .map(|name| show(name).into_owned())
            .collect();
        if !others.is_empty() {
            let (them, it) = match others.len() {
                1 => ("group", "it has"),
                _ => ("groups", "they have"),
            };
            return Err(Failure::Failed(format!(
                "stream {} has other {them} ({}): --delete-acked {when} would delete the entries \
                 {it} not read yet; use --delete-acked (acked: each is deleted once every group \
                 has acknowledged it), or add --force-delete",
                show(stream),
                others.join(", "),
            )));
        }
    }
    Ok(())
}

//! Error chains as one line, each cause said once.
//!
//! `{:#}` of an `anyhow::Error` appends every cause of the chain, but many
//! errors (the S3 client's, `thiserror` types with `{source}` in their
//! message) already print their source in their own message: the same
//! cause then appears two, three or four times. [`report`] appends a cause
//! only when the text so far does not contain it already.

use std::error::Error;

/// `e` and its causes, `": "`-separated, skipping every cause whose text
/// the message already contains (and empty ones); one line (a store's
/// multi-line answer has its line breaks replaced by spaces).
pub fn report(e: &(dyn Error + 'static)) -> String {
    let one_line = |e: &dyn Error| e.to_string().replace(['\r', '\n'], " ");
    let mut out = one_line(e);
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = one_line(c);
        if !text.is_empty() && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

/// [`report`] of an `anyhow::Error` (its contexts first).
pub fn report_anyhow(e: &anyhow::Error) -> String {
    report(e.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("connect: {0}")]
    struct Connect(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("put object k in store S: {source}")]
    struct Put {
        #[source]
        source: Connect,
    }

    #[test]
    fn each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = anyhow::Error::new(Put { source: Connect(io) }).context("claim generation 1");
        assert_eq!(format!("{e:#}").matches("refused").count(), 3, "{e:#}");
        assert_eq!(
            report_anyhow(&e),
            "claim generation 1: put object k in store S: connect: refused"
        );
    }

    #[test]
    fn one_line() {
        let e = anyhow::anyhow!("403 Forbidden: <?xml?>\n<Error/>").context("list");
        assert_eq!(report_anyhow(&e), "list: 403 Forbidden: <?xml?> <Error/>");
    }

    #[test]
    fn distinct_causes_all_appear() {
        let e = anyhow::anyhow!("disk full").context("write layer").context("flush");
        assert_eq!(report_anyhow(&e), "flush: write layer: disk full");
    }
}

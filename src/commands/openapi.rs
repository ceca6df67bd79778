//! `codebuffd openapi`: prints the OpenAPI 3.1 document of the `/v1` API, the one
//! `GET /v1/openapi.json` serves (`docs/openapi.md`), as pretty JSON on stdout.

use std::io::{self, Write};

use utoipa::OpenApi;

use crate::http::ApiDoc;

/// Writes the document to `out`; a closed pipe (`| head`) is not an error.
pub fn run(out: &mut impl Write) -> anyhow::Result<()> {
    let json = ApiDoc::openapi().to_pretty_json()?;
    match writeln!(out, "{json}").and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

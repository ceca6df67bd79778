//! A `session/prompt`'s content blocks as the session's [`UserMessage`]: text, resource links
//! and embedded resources become the prompt text; images are written to files (under the data
//! directory, one directory per session) that the agent sends to the model as images.
//!
//! * `text`: as is, blocks joined in order;
//! * `resource_link`: the file's path (for `file://` URIs; the URI otherwise), where it stands;
//! * `resource` (embedded): its text after the prompt, in a `<context ref="URI">` block; an
//!   embedded image (`blob` with an `image/*` type) is an image;
//! * `image`: the decoded `data`, written to `<data-dir>/acp-images/<session>/<uuid>.<ext>`;
//! * `audio` is refused (the agent takes none; `promptCapabilities.audio` is false).

use std::path::{Path, PathBuf};

use agent_client_protocol::v1::schema::{ContentBlock, EmbeddedResourceResource};

use crate::session::TurnImage;
use crate::session::UserMessage;

/// The largest image a prompt may carry, decoded.
pub const MAX_IMAGE_BYTES: usize = 32 * 1024 * 1024;

/// Why a prompt's content cannot be sent.
#[derive(Debug, thiserror::Error)]
pub enum ContentError {
    #[error("{0}")]
    Invalid(String),
    #[error("cannot store the prompt's image: {0}")]
    Io(#[from] std::io::Error),
}

/// An image to write: its bytes and media type.
struct PendingImage {
    bytes: Vec<u8>,
    mime: String,
}

/// The text of a prompt and the images it carries (not yet written).
struct Parsed {
    text: String,
    images: Vec<PendingImage>,
}

/// The message for `blocks`; images are written under `image_dir`.
pub fn user_message(
    blocks: &[ContentBlock],
    image_dir: &Path,
) -> Result<UserMessage, ContentError> {
    let parsed = parse(blocks)?;
    let mut images = Vec::with_capacity(parsed.images.len());
    if !parsed.images.is_empty() {
        crate::private_files::create_dir_all(image_dir)?;
    }
    for image in parsed.images {
        let path = image_dir.join(format!(
            "{}.{}",
            uuid::Uuid::new_v4().simple(),
            extension(&image.mime)
        ));
        crate::private_files::write(&path, &image.bytes)?;
        images.push(TurnImage {
            path: path.display().to_string(),
            mime: image.mime,
        });
    }
    Ok(UserMessage {
        text: parsed.text,
        images,
    })
}

/// The directory of a session's prompt images: `<data-dir>/acp-images/<session>` (the session
/// id made safe for a file name).
pub fn image_dir(data_dir: &Path, session_id: &str) -> PathBuf {
    let safe: String = session_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c.to_string()
            } else {
                format!("%{:02X}", c as u32)
            }
        })
        .collect();
    data_dir.join("acp-images").join(safe)
}

fn parse(blocks: &[ContentBlock]) -> Result<Parsed, ContentError> {
    let mut text = String::new();
    let mut context = String::new();
    let mut images = Vec::new();
    for block in blocks {
        match block {
            ContentBlock::Text(t) => text.push_str(&t.text),
            ContentBlock::ResourceLink(link) => text.push_str(&link_text(&link.uri)),
            ContentBlock::Resource(embedded) => match &embedded.resource {
                EmbeddedResourceResource::TextResourceContents(r) => {
                    context.push_str(&format!(
                        "\n<context ref=\"{}\">\n{}\n</context>",
                        r.uri, r.text
                    ));
                }
                EmbeddedResourceResource::BlobResourceContents(r) => {
                    match r.mime_type.as_deref().filter(|m| m.starts_with("image/")) {
                        Some(mime) => images.push(decode_image(&r.blob, mime)?),
                        None => context.push_str(&format!(
                            "\n<context ref=\"{}\">(binary content{} not included)</context>",
                            r.uri,
                            r.mime_type
                                .as_deref()
                                .map(|m| format!(" of type {m}"))
                                .unwrap_or_default()
                        )),
                    }
                }
                _ => {
                    return Err(ContentError::Invalid(
                        "an embedded resource of an unknown kind".into(),
                    ))
                }
            },
            ContentBlock::Image(image) => images.push(decode_image(&image.data, &image.mime_type)?),
            ContentBlock::Audio(_) => {
                return Err(ContentError::Invalid(
                    "audio prompts are not supported (promptCapabilities.audio is false)".into(),
                ))
            }
            _ => {
                return Err(ContentError::Invalid(
                    "a content block of an unknown type".into(),
                ))
            }
        }
    }
    if !context.is_empty() {
        text.push('\n');
        text.push_str(&context);
    }
    if text.trim().is_empty() && images.is_empty() {
        return Err(ContentError::Invalid("the prompt is empty".into()));
    }
    Ok(Parsed { text, images })
}

/// A resource link where it stands in the text: the path of a `file://` URI, else the URI.
fn link_text(uri: &str) -> String {
    match uri.strip_prefix("file://") {
        Some(rest) => {
            // `file://host/path` names a host; `file:///path` the local path.
            let path = if rest.starts_with('/') {
                rest
            } else {
                rest.find('/').map_or(rest, |i| &rest[i..])
            };
            percent_decode(path)
        }
        None => uri.to_owned(),
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
            if let Some(b) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn decode_image(data: &str, mime: &str) -> Result<PendingImage, ContentError> {
    if !mime.starts_with("image/") {
        return Err(ContentError::Invalid(format!(
            "an image must have an image/* type, not `{mime}`"
        )));
    }
    if data.len() / 4 * 3 > MAX_IMAGE_BYTES + 3 {
        return Err(ContentError::Invalid(format!(
            "an image is larger than {} MiB",
            MAX_IMAGE_BYTES / (1024 * 1024)
        )));
    }
    let bytes = base64_decode(data)
        .ok_or_else(|| ContentError::Invalid("an image's data is not valid base64".into()))?;
    if bytes.is_empty() {
        return Err(ContentError::Invalid("an image is empty".into()));
    }
    Ok(PendingImage {
        bytes,
        mime: mime.to_owned(),
    })
}

/// The file extension for an image type.
fn extension(mime: &str) -> &str {
    match mime {
        "image/png" => "png",
        "image/jpeg" | "image/jpg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "image/svg+xml" => "svg",
        "image/bmp" => "bmp",
        _ => "img",
    }
}

/// Standard base64 (padding optional, whitespace ignored); `None` when it is not base64.
pub fn base64_decode(data: &str) -> Option<Vec<u8>> {
    fn value(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        } as u32)
    }
    let mut out = Vec::with_capacity(data.len() / 4 * 3);
    let mut acc: u32 = 0;
    let mut bits = 0;
    let mut padding = 0;
    for &c in data.as_bytes() {
        if c.is_ascii_whitespace() {
            continue;
        }
        if c == b'=' {
            padding += 1;
            continue;
        }
        if padding > 0 {
            return None;
        }
        acc = (acc << 6) | value(c)?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    (padding <= 2).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema::{
        EmbeddedResource, ImageContent, ResourceLink, TextResourceContents,
    };

    #[test]
    fn text_links_and_embedded_resources_make_the_prompt() {
        let blocks = vec![
            ContentBlock::from("Look at "),
            ContentBlock::ResourceLink(ResourceLink::new("a b.rs", "file:///w/a%20b.rs")),
            ContentBlock::from(" please"),
            ContentBlock::Resource(EmbeddedResource::new(
                EmbeddedResourceResource::TextResourceContents(TextResourceContents::new(
                    "fn main() {}",
                    "file:///w/main.rs",
                )),
            )),
        ];
        let m = user_message(&blocks, Path::new("/nonexistent")).unwrap();
        assert_eq!(
            m.text,
            "Look at /w/a b.rs please\n\n<context ref=\"file:///w/main.rs\">\nfn main() {}\n</context>"
        );
        assert!(m.images.is_empty());
    }

    #[test]
    fn images_are_written_to_files() {
        let dir = std::env::temp_dir().join(format!("acp-content-{}", uuid::Uuid::new_v4()));
        // "PNG!" in base64.
        let blocks = vec![
            ContentBlock::from("what is this?"),
            ContentBlock::Image(ImageContent::new("UE5HIQ==", "image/png")),
        ];
        let m = user_message(&blocks, &dir).unwrap();
        assert_eq!(m.images.len(), 1);
        assert_eq!(m.images[0].mime, "image/png");
        assert!(m.images[0].path.ends_with(".png"));
        assert_eq!(std::fs::read(&m.images[0].path).unwrap(), b"PNG!");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_content_is_refused() {
        let bad = vec![ContentBlock::Image(ImageContent::new("***", "image/png"))];
        assert!(user_message(&bad, Path::new("/x")).is_err());
        let not_image = vec![ContentBlock::Image(ImageContent::new(
            "UE5HIQ==",
            "text/plain",
        ))];
        assert!(user_message(&not_image, Path::new("/x")).is_err());
        assert!(user_message(&[ContentBlock::from("  ")], Path::new("/x")).is_err());
    }

    #[test]
    fn base64_round_trips() {
        assert_eq!(base64_decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64_decode("aGVsbG8").unwrap(), b"hello");
        assert_eq!(base64_decode("aGVs\nbG8=").unwrap(), b"hello");
        assert!(base64_decode("a=b").is_none());
    }

    #[test]
    fn session_ids_make_safe_directory_names() {
        assert_eq!(
            image_dir(Path::new("/d"), "../x y"),
            PathBuf::from("/d/acp-images/%2E%2E%2Fx%20y")
        );
    }
}

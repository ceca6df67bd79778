// Image attachments of a turn (contract §1.1 `images`) → the SDK's prompt content parts.
//
// @codebuff/sdk 0.10.7: run({prompt, content}) with content: MessageContent[], where
// ImageContent = {type:"image", image: <base64 string>, mediaType: "image/png"}. With only image
// parts in `content` the user message becomes [{type:"text", text:"<user_message>PROMPT</…>"},
// ...images] (buildUserMessageContent), and the OpenAI-compatible provider sends each image as
// {type:"image_url", image_url:{url:"data:<mediaType>;base64,…"}}.

import fs from 'node:fs'
import path from 'node:path'

const MIME_BY_EXTENSION = {
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.jpeg': 'image/jpeg',
  '.gif': 'image/gif',
  '.webp': 'image/webp',
  '.bmp': 'image/bmp',
  '.svg': 'image/svg+xml',
}

/** Largest image the adapter reads (the backend has its own limits). */
export const MAX_IMAGE_BYTES = 20 * 1024 * 1024

export class ImageError extends Error {}

/**
 * Reads the turn's images (paths relative to cwd allowed). Returns ImageContent parts.
 * Throws ImageError for an unreadable, too large or non-image file.
 */
export function loadImages(images, cwd) {
  const parts = []
  for (const image of images ?? []) {
    const file = path.resolve(cwd, image.path)
    const mediaType = image.mime || MIME_BY_EXTENSION[path.extname(file).toLowerCase()]
    if (!mediaType || !/^image\//.test(mediaType)) {
      throw new ImageError(`image ${image.path}: unknown image type (give "mime")`)
    }
    let data
    try {
      const stat = fs.statSync(file)
      if (!stat.isFile()) throw new Error('not a file')
      if (stat.size > MAX_IMAGE_BYTES) throw new Error(`larger than ${MAX_IMAGE_BYTES} bytes`)
      data = fs.readFileSync(file)
    } catch (error) {
      throw new ImageError(`image ${image.path}: ${error.code ?? error.message}`)
    }
    parts.push({ type: 'image', image: data.toString('base64'), mediaType })
  }
  return parts
}

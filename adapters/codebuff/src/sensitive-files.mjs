// Files whose contents never reach the model (contract §6).
//
// The list is the real Codebuff CLI's (cli/src/utils/create-run-config.ts: isSensitiveFile /
// isEnvTemplateFile, which it hands to the SDK as `fileFilter`), plus a few credential files it
// misses (credentials.json, .git-credentials, .pgpass, secrets.{json,yaml,yml,toml}, .secrets).
// Matching is on the base name:
//   * .env and .env.* — except templates ending in .env.example / .env.sample / .env.template,
//     which are read with the SDK's "[TEMPLATE]" marker;
//   * extensions .pem .key .p12 .pfx .jks .keystore .crt .cer;
//   * names .htpasswd .netrc credentials .npmrc .yarnrc .yarnrc.yml auth.json .pypirc
//     terraform.tfvars .terraformrc (+ the additions above);
//   * SSH private keys id_rsa*, id_ed25519*, id_dsa*, id_ecdsa* (not *.pub); *_credentials;
//     anything containing "kubeconfig" or ".tfstate".
//
// Where the SDK reads files for the model, and what the adapter does about each:
//   * read_files, and the file contents the server side asks for (requestFiles: the file picker,
//     write_file/str_replace reading the current content): `overrideTools.read_files` — see
//     readFilesFiltered below;
//   * code_search (ripgrep): exclusion globs appended to the model's flags, and result blocks of
//     sensitive files dropped;
//   * the git diff in the session's file context (`git diff`, `git diff --cached` through the
//     run's spawnSource): pathspec exclusions.
// The project file tree (names only), and the file-token index (symbols of source files) are left
// as they are; terminal commands are the permission mode's business.
//
// Names can lie: `notes.txt -> .env` or `deploy-notes.txt -> ~/.ssh/id_ed25519`. So read_files and
// code_search judge a path by its real path too (symbolic links resolved, `..` folded), and a file
// under a credentials directory (.ssh, .gnupg, .aws, .kube, .docker) is sensitive whatever its
// name. git diffs show a symbolic link as its target's name, never the target's contents, so the
// diff context needs nothing more. (A hard link to a secret under an ordinary name cannot be told
// from an ordinary file.)

import fs from 'node:fs'
import path from 'node:path'
import { spawn as nodeSpawn } from 'node:child_process'

const SENSITIVE_EXTENSIONS = new Set(['.pem', '.key', '.p12', '.pfx', '.jks', '.keystore', '.crt', '.cer'])
const SENSITIVE_BASENAMES = new Set([
  '.htpasswd',
  '.netrc',
  'credentials',
  '.npmrc',
  '.yarnrc',
  '.yarnrc.yml',
  'auth.json',
  '.pypirc',
  'terraform.tfvars',
  '.terraformrc',
  // additions to the CLI's list
  'credentials.json',
  '.git-credentials',
  '.pgpass',
  'secrets.json',
  'secrets.yaml',
  'secrets.yml',
  'secrets.toml',
  '.secrets',
])
const SSH_KEY_PREFIXES = ['id_rsa', 'id_ed25519', 'id_dsa', 'id_ecdsa']
const SENSITIVE_SUFFIXES = ['_credentials']
const SENSITIVE_SUBSTRINGS = ['kubeconfig', '.tfstate']
const ENV_TEMPLATE_SUFFIXES = ['.env.example', '.env.sample', '.env.template']
/** Directories whose files are credentials whatever their names. */
const SENSITIVE_DIRS = new Set(['.ssh', '.gnupg', '.aws', '.kube', '.docker'])

/** .env.example & co.: read, marked as a template. */
export function isEnvTemplateFile(filePath) {
  const base = path.basename(String(filePath))
  return ENV_TEMPLATE_SUFFIXES.some((suffix) => base.endsWith(suffix))
}

/** True for a file whose contents must never be sent to the model. */
export function isSensitiveFile(filePath) {
  const base = path.basename(String(filePath))
  const lower = base.toLowerCase()
  if ((base === '.env' || base.startsWith('.env.')) && !isEnvTemplateFile(base)) return true
  if (SENSITIVE_EXTENSIONS.has(path.extname(lower))) return true
  if (SENSITIVE_BASENAMES.has(base) || SENSITIVE_BASENAMES.has(lower)) return true
  if (SSH_KEY_PREFIXES.some((p) => lower.startsWith(p) && !lower.endsWith('.pub'))) return true
  if (SENSITIVE_SUFFIXES.some((s) => lower.endsWith(s))) return true
  return SENSITIVE_SUBSTRINGS.some((s) => lower.includes(s))
}

/** True when a directory of `relPath` (not its last component) is a credentials directory. */
function inSensitiveDir(relPath) {
  return path.normalize(String(relPath)).split(path.sep).slice(0, -1).some((c) => SENSITIVE_DIRS.has(c))
}

/**
 * True for a file whose contents must never be sent to the model, judged by its name as given and
 * by its real path (symbolic links resolved) relative to `cwd`: a link with an ordinary name to a
 * secret is a secret. A path that does not resolve (missing, a loop) is judged by its name only.
 */
export function isSensitivePath(filePath, cwd = process.cwd(), realpath = fs.realpathSync.native) {
  const given = String(filePath)
  if (isSensitiveFile(given) || inSensitiveDir(given)) return true
  let real
  try {
    real = realpath(path.resolve(cwd, given))
  } catch {
    return false
  }
  if (isSensitiveFile(real)) return true
  let root
  try {
    root = realpath(cwd)
  } catch {
    root = path.resolve(cwd)
  }
  const inside = path.relative(root, real)
  const judged = inside && !inside.startsWith('..') && !path.isAbsolute(inside) ? inside : real
  return inSensitiveDir(judged)
}

/** The SDK's FileFilter for this list (what the real CLI passes as `fileFilter`). */
export function sensitiveFileFilter(filePath) {
  if (isSensitiveFile(filePath)) return { status: 'blocked' }
  if (isEnvTemplateFile(filePath)) return { status: 'allow-example' }
  return { status: 'allow' }
}

/**
 * overrideTools.read_files: the SDK's own getFiles, called three times so that each file gets the
 * SDK's treatment for its class:
 *   sensitive → fileFilter "blocked" (the SDK's "[BLOCKED]" status),
 *   env template → fileFilter "allow-example" ("[TEMPLATE]\n" + content),
 *   everything else → no fileFilter, i.e. the SDK's default .gitignore / default-ignore check.
 * (A single `fileFilter` cannot do this: giving one switches the SDK's gitignore check off for
 * every file — the real CLI accepts that; the adapter keeps gitignored files and `.git/` unread.)
 */
export function createFilteredReadFiles({ getFiles, cwd, fs }) {
  return async function readFilesFiltered({ filePaths }) {
    const groups = { blocked: [], example: [], plain: [] }
    for (const filePath of filePaths ?? []) {
      if (!filePath) continue
      const status = isSensitivePath(filePath, cwd) ? 'blocked' : sensitiveFileFilter(filePath).status
      if (status === 'blocked') groups.blocked.push(filePath)
      else if (status === 'allow-example') groups.example.push(filePath)
      else groups.plain.push(filePath)
    }
    const [blocked, example, plain] = await Promise.all([
      groups.blocked.length ? getFiles({ filePaths: groups.blocked, cwd, fs, fileFilter: () => ({ status: 'blocked' }) }) : {},
      groups.example.length ? getFiles({ filePaths: groups.example, cwd, fs, fileFilter: () => ({ status: 'allow-example' }) }) : {},
      groups.plain.length ? getFiles({ filePaths: groups.plain, cwd, fs }) : {},
    ])
    return { ...plain, ...example, ...blocked }
  }
}

/** ripgrep globs excluding the sensitive files (appended last, so they win over the model's). */
export const RG_EXCLUDE_GLOBS = [
  '!.env',
  '!.env.*',
  ...[...SENSITIVE_EXTENSIONS].map((ext) => `!*${ext}`),
  ...[...SENSITIVE_BASENAMES].map((name) => `!${name}`),
  ...SSH_KEY_PREFIXES.map((p) => `!${p}*`),
  ...SENSITIVE_SUFFIXES.map((s) => `!*${s}`),
  ...SENSITIVE_SUBSTRINGS.map((s) => `!*${s}*`),
]

/**
 * overrideTools.code_search: the SDK's codeSearch with the exclusion globs added to the model's
 * flags, then any result block of a sensitive file dropped (a file named explicitly in the flags
 * is searched by ripgrep whatever the globs say).
 */
export function createFilteredCodeSearch({ codeSearch, cwd, log = () => {} }) {
  return async function codeSearchFiltered(input) {
    const flags = [input?.flags ?? '', ...RG_EXCLUDE_GLOBS.map((g) => `--glob=${g}`)].filter(Boolean).join(' ')
    const result = await codeSearch({ projectPath: cwd, ...input, flags })
    try {
      const value = result?.[0]?.value
      if (value && typeof value.stdout === 'string') {
        // Result paths are relative to the search's directory (`cwd` of the input, in the project).
        const searchDir = path.resolve(cwd, typeof input?.cwd === 'string' ? input.cwd : '.')
        const filtered = dropSensitiveBlocks(value.stdout, (p) => isSensitivePath(p, searchDir))
        if (filtered !== value.stdout) {
          log('code_search: dropped results from sensitive files')
          return [{ ...result[0], value: { ...value, stdout: filtered } }]
        }
      }
    } catch {
      // leave the result alone
    }
    return result
  }
}

/**
 * The SDK formats search results as blocks separated by blank lines, each starting with a
 * "<path>:" header line followed by "<line>:<text>" lines. Drops the blocks of sensitive files.
 */
export function dropSensitiveBlocks(stdout, isSensitive = isSensitiveFile) {
  const lines = stdout.split('\n')
  const out = []
  let skipping = false
  let atBlockStart = true
  for (const line of lines) {
    if (line.trim() === '') {
      skipping = false
      atBlockStart = true
      out.push(line)
      continue
    }
    if (atBlockStart && line.endsWith(':') && !/^\d+[:-]/.test(line) && isSensitive(line.slice(0, -1))) {
      skipping = true
    }
    atBlockStart = false
    if (!skipping) out.push(line)
  }
  return out.join('\n')
}

/** git pathspecs (repository-wide) excluding the sensitive files. */
export const GIT_EXCLUDE_PATHSPECS = [
  ':(top)',
  ...[
    '**/.env',
    '**/.env.*',
    ...[...SENSITIVE_EXTENSIONS].map((ext) => `**/*${ext}`),
    ...[...SENSITIVE_BASENAMES].map((name) => `**/${name}`),
    ...SSH_KEY_PREFIXES.map((p) => `**/${p}*`),
    ...SENSITIVE_SUFFIXES.map((s) => `**/*${s}`),
    ...SENSITIVE_SUBSTRINGS.map((s) => `**/*${s}*`),
  ].map((glob) => `:(top,exclude,glob,icase)${glob}`),
]

/**
 * The run's spawnSource: the SDK uses it only for the git commands of the initial file context
 * (`git status`, `git diff`, `git diff --cached`, `git shortlog`). The two diffs get the exclusion
 * pathspecs, so a tracked .env's changes never appear in the context.
 */
export function createFilteringSpawn(spawn = nodeSpawn) {
  return function filteringSpawn(command, args, options) {
    if (command === 'git' && Array.isArray(args) && args[0] === 'diff' && !args.includes('--')) {
      return spawn(command, [...args, '--', ...GIT_EXCLUDE_PATHSPECS], options)
    }
    return spawn(command, args, options)
  }
}

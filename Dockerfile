# codebuffd in a container: the daemon, Node.js and the Codebuff adapter with its packages
# installed at build time (the first session needs no registry), as a non-root user.
#
#   docker build -t codebuffd .
#   docker run -d -p 2468:2468 -e CODEBUFFD_TOKEN=… -e CODEBUFF_API_KEY=… \
#       -v codebuffd-data:/var/lib/codebuffd -v "$PWD":/work codebuffd
#
# It listens on 0.0.0.0:2468 and refuses to start without CODEBUFFD_TOKEN (or an explicit
# CODEBUFFD_NO_TOKEN=1). Sessions work in /work unless they name a directory. See docs/deploy.md.

# ---- build: the release binary (the adapter's sources are embedded by build.rs) ----
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    cargo build --release --locked --bin codebuffd \
    && cp target/release/codebuffd /usr/local/bin/codebuffd

# ---- runtime: Node.js ≥ 20 (the adapter's) and the binary ----
FROM node:22-bookworm-slim
ENV NPM_CONFIG_UPDATE_NOTIFIER=false
COPY --from=build /usr/local/bin/codebuffd /usr/local/bin/codebuffd
# The binary's own unpack + `npm ci` step, into a directory outside the data volume.
RUN codebuffd install-adapter --into /opt/codebuffd/adapter \
    && npm cache clean --force \
    && groupadd --system --gid 10001 codebuffd \
    && useradd --system --no-log-init --uid 10001 --gid 10001 --create-home --home-dir /home/codebuffd codebuffd \
    && mkdir -p /var/lib/codebuffd /work \
    && chown codebuffd:codebuffd /var/lib/codebuffd /work
ENV CODEBUFFD_ADAPTER_DIR=/opt/codebuffd/adapter \
    CODEBUFFD_DATA_DIR=/var/lib/codebuffd \
    CODEBUFFD_HOST=0.0.0.0 \
    CODEBUFFD_PORT=2468
USER 10001:10001
WORKDIR /work
VOLUME ["/var/lib/codebuffd"]
EXPOSE 2468
# /v1/health needs no token; the image has node but no curl.
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
    CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.CODEBUFFD_PORT||2468)+'/v1/health').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
ENTRYPOINT ["codebuffd"]
CMD ["server"]

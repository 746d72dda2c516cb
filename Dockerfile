# syntax=docker/dockerfile:1
#
# Multi-stage image of the pageserver and its load generator.
#
#   docker build -t pageserver .
#   docker run -p 64000:64000 -p 9898:9898 -v pageserver-data:/data pageserver
#
# The runtime image holds only the two release binaries and the default
# config; it runs as the unprivileged user `pageserver` with its workdir on
# the /data volume. Listen addresses are overridden to 0.0.0.0 so the ports
# are reachable from outside the container; every other key comes from
# /etc/pageserver/pageserver.toml (documented defaults) and can be overridden
# by appending `-c key=value` arguments to `docker run`.

ARG RUST_VERSION=1
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS builder
WORKDIR /src
# The whole workspace (see .dockerignore for what is left out).
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p pageserver -p pagebench \
    && mkdir -p /out \
    && cp target/release/pageserver target/release/pagebench /out/

FROM debian:${DEBIAN_RELEASE}-slim AS runtime
RUN groupadd --system --gid 10001 pageserver \
    && useradd --system --uid 10001 --gid pageserver --home-dir /data --shell /usr/sbin/nologin pageserver \
    && mkdir -p /data /etc/pageserver \
    && chown pageserver:pageserver /data
COPY --from=builder /out/pageserver /out/pagebench /usr/local/bin/
COPY config/pageserver.toml /etc/pageserver/pageserver.toml

USER pageserver:pageserver
WORKDIR /data
VOLUME ["/data"]
# 64000: page service (libpq / pagestream); 9898: HTTP management API and /metrics.
EXPOSE 64000 9898
# SIGTERM (docker stop) triggers the daemon's bounded graceful shutdown.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/pageserver", "--workdir", "/data", "--config", "/etc/pageserver/pageserver.toml", \
            "-c", "listen_pg_addr=\"0.0.0.0:64000\"", "-c", "listen_http_addr=\"0.0.0.0:9898\""]
CMD []

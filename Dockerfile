# Nave's images: one target per binary, from one build of the workspace.
#
#   docker buildx build --target nave-hub   -t nave-hub:dev   .
#   docker buildx build --target nave-agent -t nave-agent:dev .
#   docker buildx build --target nave-sim   -t nave-sim:dev   .
#
# Multi-arch (`--platform linux/amd64,linux/arm64`) cross-compiles on the build machine instead
# of emulating a compiler; the build machine must be amd64 (as the release workflow's is). Each image is the distroless `cc` base (glibc,
# libgcc, CA certificates, no shell) with one binary, run as the unprivileged `nonroot` user
# (65532). `.ci/image` builds the same runtime stages with buildah from binaries built outside
# and starts each image's binary, on machines without a container engine or registry access.

# The Rust release the workspace is tested with; the base images are pinned by the release
# workflow's build arguments (digests), these are the defaults for a local build.
ARG RUST_IMAGE=docker.io/library/rust:1.95-slim-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot
# Where the runtime stages take the binaries from: the `build` stage, or an image holding
# /out/<binary> (what `.ci/image` passes, so no compiler image is fetched).
ARG BINARIES=build

FROM --platform=$BUILDPLATFORM ${RUST_IMAGE} AS build
ARG TARGETARCH
WORKDIR /src
# A cross linker and C compiler for arm64 (ring and the bundled SQLite compile C).
RUN set -eu; \
    if [ "$TARGETARCH" = arm64 ] && [ "$(dpkg --print-architecture)" != arm64 ]; then \
      apt-get update; \
      apt-get install -y --no-install-recommends gcc-aarch64-linux-gnu libc6-dev-arm64-cross; \
      rm -rf /var/lib/apt/lists/*; \
    fi
COPY . .
# Locked dependencies, no incremental state, the build machine's paths remapped, so the same
# commit builds the same binaries; the release workflow also pins the base images by digest and
# clamps file and image timestamps to the commit's (SOURCE_DATE_EPOCH, rewrite-timestamp).
# Debug information is stripped (the hub: 185 MiB to 36 MiB), symbols are kept for backtraces.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target,id=nave-target-${TARGETARCH} \
    set -eu; \
    case "$TARGETARCH" in \
      amd64) target=x86_64-unknown-linux-gnu ;; \
      arm64) target=aarch64-unknown-linux-gnu ;; \
      *) echo "unsupported architecture: $TARGETARCH" >&2; exit 1 ;; \
    esac; \
    rustup target add "$target"; \
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
           CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc \
           AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar \
           CARGO_INCREMENTAL=0 \
           CARGO_PROFILE_RELEASE_STRIP=debuginfo \
           RUSTFLAGS="--remap-path-prefix=/src=. --remap-path-prefix=/usr/local/cargo=cargo"; \
    cargo build --release --locked --target "$target" \
      --bin nave-hub --bin nave-agent --bin nave-sim; \
    mkdir -p /out; \
    for bin in nave-hub nave-agent nave-sim; do \
      install -m 0755 "target/$target/release/$bin" "/out/$bin"; \
    done

FROM ${BINARIES} AS binaries

FROM ${RUNTIME_IMAGE} AS nave-hub
COPY --from=binaries /out/nave-hub /usr/local/bin/nave-hub
USER 65532:65532
# The REST and agent API, and metrics (the chart's defaults).
EXPOSE 8443 9090
ENTRYPOINT ["/usr/local/bin/nave-hub"]
CMD ["run"]

FROM ${RUNTIME_IMAGE} AS nave-agent
COPY --from=binaries /out/nave-agent /usr/local/bin/nave-agent
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/nave-agent"]

FROM ${RUNTIME_IMAGE} AS nave-sim
COPY --from=binaries /out/nave-sim /usr/local/bin/nave-sim
USER 65532:65532
# `docker run --network host ghcr.io/nave-dev/nave-sim up --dir /tmp/nave`: the playground
# serves on loopback, so it is reached from the host's network.
ENTRYPOINT ["/usr/local/bin/nave-sim"]

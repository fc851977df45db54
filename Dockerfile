# mutexd: the server image. Multi-stage: the build stage has the compilers and -dev
# packages; the runtime stage only the shared libraries, and runs as a non-root user.
#
#   docker build -t mutexd .
#   docker build --build-arg BASE_IMAGE=registry.example/debian:bookworm-slim -t mutexd .

ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      gcc libc6-dev make cmake pkg-config \
      libmicrohttpd-dev libcjson-dev libsqlite3-dev libcurl4-openssl-dev libssl-dev zlib1g-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt VERSION ./
COPY common common
COPY actors actors
COPY persistence persistence
COPY blob blob
COPY http http
COPY cmake cmake
COPY ui ui
COPY server server
COPY bench bench
COPY clients clients
COPY tests/unit tests/unit
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DMUTEXD_TESTS=OFF \
          -DMUTEXD_FAULT_INJECTION=OFF -DMUTEXD_SYSTEMD=OFF \
 && cmake --build /build -j"$(nproc)" --target mutexd mutexctl \
 && install -D -m 0755 /build/mutexd /out/usr/local/bin/mutexd \
 && install -D -m 0755 "$(find /build -name mutexctl -type f | head -n1)" /out/usr/local/bin/mutexctl

FROM ${BASE_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="mutexd" \
      org.opencontainers.image.description="A lease server for leader election and guarded resources, over HTTP/JSON" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.documentation="README.md"
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libmicrohttpd12 libcjson1 libsqlite3-0 libcurl4 libssl3 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/mutexd --shell /usr/sbin/nologin mutexd \
 && mkdir -p /var/lib/mutexd \
 && chown mutexd:mutexd /var/lib/mutexd \
 && chmod 700 /var/lib/mutexd
COPY --from=build /out/ /
USER mutexd
VOLUME /var/lib/mutexd
ENV MUTEXD_LISTEN=0.0.0.0:8080 \
    MUTEXD_DATA_DIR=/var/lib/mutexd
EXPOSE 8080
# --probe asks this server's /healthz (from the same MUTEXD_* settings): no curl needed.
HEALTHCHECK --interval=5s --timeout=3s --start-period=30s --retries=3 \
    CMD ["mutexd", "--probe"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["mutexd"]

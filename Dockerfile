# Multi-stage image. Both stages run the same scripts as the README and CI
# (scripts/install-deps.sh, scripts/build.sh), so what is tested is what is shipped.
# Without Docker: scripts/image.sh builds this file with podman (see docs/OPERATIONS.md, "Container image").
FROM debian:bookworm AS build
WORKDIR /src
# Only what compiling the daemon reads, so that changes elsewhere (tests, docs) reuse this layer.
COPY CMakeLists.txt ./
COPY scripts/ scripts/
COPY src/ src/
COPY config/ config/
COPY systemd/ systemd/
# Without debug information: the same -O2 code, a third less compile time, and a binary of a few
# MB instead of 95 (nothing in the image reads the daemon's own DWARF).
RUN TPE_DEPS=--build TPE_BUILD_TESTS=OFF TPE_DEBUG_INFO=OFF bash scripts/build.sh

FROM debian:bookworm-slim
COPY scripts/install-deps.sh /tmp/install-deps.sh
RUN bash /tmp/install-deps.sh --runtime && rm -rf /var/lib/apt/lists/* /tmp/install-deps.sh
COPY --from=build /src/build/tracepoint_exporter /usr/bin/tracepoint_exporter
COPY config/default.json /etc/tracepoint_exporter/config.json
EXPOSE 9478
# As deploy/kubernetes/daemonset.yaml runs it: host PID namespace, the host's tracefs, a read-only
# root and CAP_PERFMON, CAP_BPF, CAP_SYS_ADMIN, CAP_IPC_LOCK, CAP_SYSLOG (tests/image/smoke_test.sh
# does this):
#   docker run --pid=host --read-only --cap-drop=ALL --cap-add=PERFMON,BPF,SYS_ADMIN,IPC_LOCK,SYSLOG \
#     -v /sys/kernel/tracing:/sys/kernel/tracing -p 9478:9478 IMAGE
# The flags are CMD, not ENTRYPOINT, so that a container's own arguments (the DaemonSet's args,
# `docker run IMAGE --flags`) replace them instead of repeating --config.file.
ENTRYPOINT ["/usr/bin/tracepoint_exporter"]
CMD ["--config.file=/etc/tracepoint_exporter/config.json"]

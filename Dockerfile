# Multi-stage image. Both stages run the same scripts as the README and CI
# (scripts/install-deps.sh, scripts/build.sh), so what is tested is what is shipped.
FROM debian:bookworm AS build
WORKDIR /src
COPY . .
RUN bash scripts/build.sh

FROM debian:bookworm-slim
COPY scripts/install-deps.sh /tmp/install-deps.sh
RUN bash /tmp/install-deps.sh --runtime && rm -rf /var/lib/apt/lists/* /tmp/install-deps.sh
COPY --from=build /src/build/tracepoint_exporter /usr/bin/tracepoint_exporter
COPY config/default.json /etc/tracepoint_exporter/config.json
EXPOSE 9478
# Run privileged (or with CAP_PERFMON, CAP_SYS_ADMIN) with the host's tracefs and PID namespace:
#   docker run --privileged --pid=host -v /sys/kernel/tracing:/sys/kernel/tracing -p 9478:9478 IMAGE
ENTRYPOINT ["/usr/bin/tracepoint_exporter", "--config.file=/etc/tracepoint_exporter/config.json"]

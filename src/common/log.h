// Logging facade over spdlog, so libraries do not depend on a logger's API directly.
// Thread-safe (spdlog's default logger is). Hot paths never log per event: errors there are
// counted as data (self-metrics) instead.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

#include "common/status.h"

namespace tpe {

// Sets the level from "debug", "info", "warn", "error"; InvalidArgument naming the valid ones.
Status SetLogLevel(const std::string& level);

}  // namespace tpe

#define TPE_LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define TPE_LOG_INFO(...) SPDLOG_INFO(__VA_ARGS__)
#define TPE_LOG_WARN(...) SPDLOG_WARN(__VA_ARGS__)
#define TPE_LOG_ERROR(...) SPDLOG_ERROR(__VA_ARGS__)

#include "common/log.h"

namespace tpe {

Status SetLogLevel(const std::string& level) {
  static const std::pair<const char*, spdlog::level::level_enum> kLevels[] = {{"debug", spdlog::level::debug},
                                                                              {"info", spdlog::level::info},
                                                                              {"warn", spdlog::level::warn},
                                                                              {"error", spdlog::level::err}};
  for (const auto& [name, lvl] : kLevels) {
    if (level == name) {
      spdlog::set_level(lvl);
      return Status::Ok();
    }
  }
  return InvalidArgument("--log.level=" + level + " is not one of debug, info, warn, error");
}

}  // namespace tpe

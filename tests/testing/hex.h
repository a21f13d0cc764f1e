// Reads the hex record files under tests/data/*/records/ (see tests/tools/capture_records.cc).
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "common/file_util.h"

namespace tpe::testing {

inline std::vector<uint8_t> ReadHexFile(const std::string& path) {
  std::vector<uint8_t> out;
  auto text = ReadFileToString(path);
  if (!text.ok()) return out;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string byte;
    while (ls >> byte) out.push_back(static_cast<uint8_t>(std::stoul(byte, nullptr, 16)));
  }
  return out;
}

// Bytes of a hex string such as "0900 0000 2a": pairs of hex digits, spaces ignored.
inline std::vector<uint8_t> ParseHex(const std::string& hex) {
  std::string digits;
  for (char c : hex) {
    if (c != ' ') digits.push_back(c);
  }
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < digits.size(); i += 2) {
    out.push_back(static_cast<uint8_t>(std::stoul(digits.substr(i, 2), nullptr, 16)));
  }
  return out;
}

}  // namespace tpe::testing

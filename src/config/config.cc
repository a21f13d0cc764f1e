#include "config/config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "collectors/buckets.h"
#include "collectors/native_buckets.h"
#include "common/scoped_fd.h"
#include "config/probe_ref.h"
#include "decode/field_extractor.h"
#include "filter/filter.h"

namespace tpe {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxBuckets = Buckets::kMaxBuckets;

// A number as short as reads back the same: whole numbers in full ("100000000"), others in %g
// style ("0.5", "1e-07", "1.7e+308").
std::string Num(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9007199254740992.0) {
    return std::to_string(static_cast<int64_t>(v));
  }
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::general);
  return std::string(buf, r.ptr);
}

// Decodes one UTF-8 code point of `s` at `*i` (advancing it); false for anything that is not
// well-formed UTF-8 (overlong forms, surrogates, beyond U+10FFFF, truncated sequences).
bool NextCodePoint(std::string_view s, size_t* i, uint32_t* cp) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(*i);
  size_t n = 0;
  uint32_t c = 0, min = 0;
  if (b0 < 0x80) {
    *cp = b0;
    ++*i;
    return true;
  } else if ((b0 & 0xe0) == 0xc0) {
    n = 1, c = b0 & 0x1f, min = 0x80;
  } else if ((b0 & 0xf0) == 0xe0) {
    n = 2, c = b0 & 0x0f, min = 0x800;
  } else if ((b0 & 0xf8) == 0xf0) {
    n = 3, c = b0 & 0x07, min = 0x10000;
  } else {
    return false;
  }
  if (*i + n >= s.size()) return false;
  for (size_t k = 1; k <= n; ++k) {
    if ((byte(*i + k) & 0xc0) != 0x80) return false;
    c = (c << 6) | (byte(*i + k) & 0x3f);
  }
  if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return false;
  *cp = c;
  *i += n + 1;
  return true;
}

bool IsControl(uint32_t cp) { return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f); }

std::string Hex(uint32_t v, int digits) {
  static const char kDigits[] = "0123456789ABCDEF";
  std::string out(static_cast<size_t>(digits), '0');
  for (int k = digits - 1; k >= 0; --k, v >>= 4) out[static_cast<size_t>(k)] = kDigits[v & 0xf];
  return out;
}

// `s` in double quotes, with quotes, backslashes and control characters escaped JSON-style and
// bytes that are not UTF-8 as \xNN: safe to print whatever the config held.
std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const size_t at = i;
    uint32_t cp = 0;
    if (!NextCodePoint(s, &i, &cp)) {
      out += "\\x" + Hex(static_cast<unsigned char>(s[at]), 2);
      i = at + 1;
    } else if (cp == '"' || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (IsControl(cp)) {
      out += "\\u" + Hex(cp, 4);
    } else {
      out.append(s.substr(at, i - at));
    }
  }
  return out + "\"";
}

// Text from a library (an exception's what()) made printable: bytes outside printable ASCII as
// \xNN, at most `max` bytes.
std::string Printable(std::string_view s, size_t max = 200) {
  std::string out;
  for (unsigned char ch : s) {
    if (out.size() >= max) return out + "...";
    if (ch >= 0x20 && ch < 0x7f) {
      out += static_cast<char>(ch);
    } else {
      out += "\\x" + Hex(ch, 2);
    }
  }
  return out;
}

// How a string value may look.
enum class Text {
  kName,   // names, events, fields, keywords: no control characters at all
  kProse,  // help and filter: tab and newline allowed
};

class Checker {
 public:
  explicit Checker(std::string path) : path_(std::move(path)) {}

  Status Error(const std::string& json_path, const std::string& what) const {
    return InvalidArgument(path_ + ": " + json_path + ": " + what);
  }

  Status OnlyKeys(const json& obj, const std::string& json_path, const std::set<std::string>& allowed) const {
    for (const auto& [k, v] : obj.items()) {
      if (!allowed.count(k)) {
        std::string list;
        for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
        return Error(json_path, "unknown key " + Quote(k) + " (valid keys: " + list + ")");
      }
    }
    return Status::Ok();
  }

  // Valid UTF-8 (the JSON parser already insists) and no control characters but, for kProse,
  // tab and newline. A NUL would cut the string short where it reaches C (the kernel filter, a
  // label value); others garble terminals, logs and the exposition.
  Status CheckText(const std::string& json_path, std::string_view s, Text kind) const {
    for (size_t i = 0; i < s.size();) {
      const size_t at = i;
      uint32_t cp = 0;
      if (!NextCodePoint(s, &i, &cp)) {
        return Error(json_path, "is not valid UTF-8 (byte 0x" + Hex(static_cast<unsigned char>(s[at]), 2) +
                                    " at byte " + std::to_string(at) + ")");
      }
      if (IsControl(cp) && !(kind == Text::kProse && (cp == '\t' || cp == '\n'))) {
        return Error(json_path, "contains the control character U+" + Hex(cp, 4) + " at byte " + std::to_string(at) +
                                    (kind == Text::kProse ? "; only tab and newline are allowed here"
                                                          : "; control characters are not allowed here"));
      }
    }
    return Status::Ok();
  }

  Status GetString(const json& obj, const std::string& json_path, const std::string& key, bool required,
                   std::string* out, Text kind = Text::kName) const {
    auto it = obj.find(key);
    if (it == obj.end()) return required ? Error(json_path, "missing required key \"" + key + "\"") : Status::Ok();
    if (!it->is_string()) return Error(json_path + "." + key, "must be a string, not " + std::string(it->type_name()));
    const std::string& s = it->get_ref<const std::string&>();
    TPE_RETURN_IF_ERROR(CheckText(json_path + "." + key, s, kind));
    *out = s;
    return Status::Ok();
  }

  // A kernel event filter: text as GetString (prose), at most 4095 bytes: perf_event_set_filter()
  // copies it with strndup_user(arg, PAGE_SIZE) and refuses a longer one with EINVAL.
  Status GetFilter(const json& obj, const std::string& json_path, std::string* out) const {
    TPE_RETURN_IF_ERROR(GetString(obj, json_path, "filter", false, out, Text::kProse));
    if (out->size() > kMaxFilterBytes) {
      return Error(json_path + ".filter", "is " + std::to_string(out->size()) +
                                              " bytes long; the kernel accepts at most " +
                                              std::to_string(kMaxFilterBytes) +
                                              " (one page): shorten it, e.g. match a range instead of listing values");
    }
    return Status::Ok();
  }

  // Any number (the parser refuses those beyond a double; see TreeBuilder).
  Status GetNumber(const json& obj, const std::string& json_path, const std::string& key, bool required,
                   double* out) const {
    auto it = obj.find(key);
    if (it == obj.end()) return required ? Error(json_path, "missing required key \"" + key + "\"") : Status::Ok();
    if (!it->is_number()) return Error(json_path + "." + key, "must be a number, not " + std::string(it->type_name()));
    const double v = it->get<double>();
    if (!std::isfinite(v)) return Error(json_path + "." + key, "must be a finite number");
    *out = v;
    return Status::Ok();
  }

  // A whole number in lo..hi. A float that is whole (64.0, 1e6) is that number; a fraction, a
  // negative number or anything else is an error, never truncated or wrapped.
  Status GetWhole(const json& obj, const std::string& json_path, const std::string& key, uint64_t lo, uint64_t hi,
                  uint64_t* out) const {
    auto it = obj.find(key);
    if (it == obj.end()) return Status::Ok();
    const std::string kp = json_path + "." + key;
    const std::string want = "must be a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
    const std::string range = " is out of range " + std::to_string(lo) + ".." + std::to_string(hi);
    uint64_t v = 0;
    if (it->is_number_unsigned()) {
      v = it->get<uint64_t>();
    } else if (it->is_number_integer()) {  // negative: nlohmann stores non-negative integers as unsigned
      return Error(kp, want + ", not " + std::to_string(it->get<int64_t>()));
    } else if (it->is_number_float()) {
      const double d = it->get<double>();
      if (!std::isfinite(d) || !(d >= 0) || d != std::floor(d)) return Error(kp, want + ", not " + Num(d));
      if (d >= 18446744073709551616.0) return Error(kp, Num(d) + range);  // 2^64: would not convert
      v = static_cast<uint64_t>(d);
    } else {
      return Error(kp, want + ", not " + std::string(it->type_name()));
    }
    if (v < lo || v > hi) return Error(kp, std::to_string(v) + range);
    *out = v;
    return Status::Ok();
  }

 private:
  std::string path_;
};

// The name of a table's value, as a string to build messages with.
template <NamedEnum E>
std::string Name(E value) {
  return std::string(NameOf(value));
}

// A name table's value (config/config_names.h) named `name`, into *out; else an error at
// `json_path` listing the valid names (those of the table but `except`).
template <NamedEnum E>
Status ParseName(const Checker& c, const std::string& json_path, const std::string& name, E* out,
                 std::initializer_list<E> except = {}) {
  std::optional<E> v = FromName<E>(name);
  for (E x : except) {
    if (v == x) v.reset();
  }
  if (!v) return c.Error(json_path, NotOneOf<E>(Quote(name), except));
  *out = *v;
  return Status::Ok();
}

// A JSON path segment for an object key: .key, or ["key"] when it is not an identifier.
std::string KeySegment(const std::string& key, bool first) {
  bool ident = !key.empty() && !std::isdigit(static_cast<unsigned char>(key[0]));
  for (char ch : key) ident = ident && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_');
  if (!ident) return (first ? "$[" : "[") + Quote(key) + "]";
  return first ? key : "." + key;
}

// Builds the json tree as nlohmann's own parser does, and besides: refuses a key repeated within
// one object (nlohmann would keep the last silently), and knows the JSON path of the value being
// parsed, so that a syntax error or a number too large for a double (nlohmann's out_of_range
// 406, which its own parse() throws) is reported where it is. Never throws: errors are kept.
class TreeBuilder {
 public:
  json& root() { return root_; }

  bool null() { return Add(nullptr) != nullptr; }
  bool boolean(bool v) { return Add(v) != nullptr; }
  bool number_integer(json::number_integer_t v) { return Add(v) != nullptr; }
  bool number_unsigned(json::number_unsigned_t v) { return Add(v) != nullptr; }
  bool number_float(json::number_float_t v, const json::string_t& /*text*/) { return Add(v) != nullptr; }
  bool string(json::string_t& v) { return Add(std::move(v)) != nullptr; }
  bool binary(json::binary_t& v) { return Add(json::binary(std::move(v))) != nullptr; }  // not in JSON text
  bool start_object(std::size_t /*size*/) { return Open(json::object()); }
  bool start_array(std::size_t /*size*/) { return Open(json::array()); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }
  bool key(json::string_t& k) {
    Frame& f = frames_.back();
    if (f.node->contains(k)) {
      duplicate_ = true;
      error_path_ = Path(frames_.size() - 1);
      error_key_ = k;
      return false;
    }
    f.key = k;
    f.has_key = true;
    return true;
  }
  bool parse_error(std::size_t position, const std::string& last_token, const json::exception& ex) {
    failed_ = true;
    error_position_ = position;
    error_token_ = last_token;
    error_id_ = ex.id;
    error_what_ = ex.what();
    error_path_ = Path(frames_.size());
    return false;
  }

  // The error, once sax_parse returned false.
  Status Error(const std::string& file, const std::string& text) const {
    if (duplicate_) {
      return InvalidArgument(file + ": " + error_path_ + ": duplicate key " + Quote(error_key_) +
                             "; a key may appear once in an object");
    }
    if (!failed_) return InvalidArgument(file + ": malformed JSON");  // not expected: sax_parse reports every error
    // nlohmann's position counts the characters read, the offending one included.
    const size_t end = std::min(error_position_, text.size());
    size_t offset = end > 0 ? end - 1 : 0;
    if (error_id_ == 406 && error_token_.size() <= end) offset = end - error_token_.size();  // the number's start
    const size_t line_start = offset == 0 ? 0 : text.rfind('\n', offset - 1) + 1;            // npos + 1 == 0
    size_t line = 1;
    for (size_t k = 0; k < offset; ++k) line += text[k] == '\n';
    const std::string where = "line " + std::to_string(line) + ", column " + std::to_string(offset - line_start + 1);
    if (error_id_ == 406) {
      return InvalidArgument(file + ": " + error_path_ + ": the number " + Printable(error_token_, 40) + " (" + where +
                             ") is too large; numbers must be within " + Num(-std::numeric_limits<double>::max()) +
                             ".." + Num(std::numeric_limits<double>::max()));
    }
    // "[json.exception.parse_error.101] parse error at line 1, column 2: syntax error ..." ->
    // "syntax error ..."; the position is ours.
    std::string_view what = error_what_;
    if (size_t p = what.find("] "); p != std::string_view::npos) what.remove_prefix(p + 2);
    if (what.starts_with("parse error")) {
      if (size_t p = what.find(": "); p != std::string_view::npos) what.remove_prefix(p + 2);
    }
    std::string detail = Printable(what);
    if (detail.find("UTF-8") != std::string::npos) detail += " (the config must be UTF-8 text)";
    return InvalidArgument(file + ": malformed JSON at " + where + " (at " + error_path_ + "): " + detail);
  }

 private:
  struct Frame {
    json* node;  // an object or array inside root_; stable while it is open
    std::string key;
    bool has_key = false;
  };

  // The path of the value being parsed within the first n open containers.
  std::string Path(size_t n) const {
    std::string out;
    for (size_t j = 0; j < n; ++j) {
      const Frame& f = frames_[j];
      if (f.node->is_array()) {
        // An open child is already the last element; a value being parsed is the next one.
        size_t index = f.node->size();
        if (j + 1 < frames_.size() && index > 0) --index;
        out += (out.empty() ? "$[" : "[") + std::to_string(index) + "]";
      } else if (f.has_key) {
        out += KeySegment(f.key, out.empty());
      }
    }
    return out.empty() ? "$" : out;
  }

  json* Add(json v) {
    if (frames_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json& top = *frames_.back().node;
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    auto [it, inserted] = top.get_ref<json::object_t&>().emplace(frames_.back().key, std::move(v));
    return &it->second;
  }
  bool Open(json v) {
    json* node = Add(std::move(v));
    if (node == nullptr) return false;
    frames_.push_back({node, "", false});
    return true;
  }
  bool Close() {
    frames_.pop_back();
    return true;
  }

  json root_;
  std::vector<Frame> frames_;
  bool duplicate_ = false, failed_ = false;
  size_t error_position_ = 0;
  int error_id_ = 0;
  std::string error_token_, error_what_, error_path_, error_key_;
};

Status ParseLabel(const Checker& c, const json& j, const std::string& jp, bool latency, LabelConfig* l) {
  if (!j.is_object()) return c.Error(jp, "a label must be an object like {\"name\": \"comm\", \"source\": \"comm\"}");
  if (latency) {
    TPE_RETURN_IF_ERROR(c.OnlyKeys(j, jp, {"name", "field", "source", "decode", "from"}));
    if (j.contains("from")) {
      std::string from;
      TPE_RETURN_IF_ERROR(c.GetString(j, jp, "from", true, &from));
      TPE_RETURN_IF_ERROR(ParseName(c, jp + ".from", from, &l->from));
    }
  } else {
    TPE_RETURN_IF_ERROR(c.OnlyKeys(j, jp, {"name", "field", "source", "decode"}));
  }
  TPE_RETURN_IF_ERROR(c.GetString(j, jp, "name", true, &l->name));
  TPE_RETURN_IF_ERROR(c.GetString(j, jp, "field", false, &l->field));
  std::string source, decode;  // "" or absent: none (a field label), auto
  TPE_RETURN_IF_ERROR(c.GetString(j, jp, "source", false, &source));
  TPE_RETURN_IF_ERROR(c.GetString(j, jp, "decode", false, &decode));
  l->json_path = jp;
  if (!IsValidLabelName(l->name)) {
    return c.Error(jp + ".name",
                   Quote(l->name) + " is not a valid label name ([a-zA-Z_][a-zA-Z0-9_]*, not starting with __)");
  }
  if (l->field.empty() == source.empty()) {
    return c.Error(jp, "a label needs exactly one of \"field\" (a tracepoint field) or \"source\" (" +
                           NameList<LabelSource>() + ")");
  }
  if (!source.empty()) TPE_RETURN_IF_ERROR(ParseName(c, jp + ".source", source, &l->source));
  if (j.contains("decode")) TPE_RETURN_IF_ERROR(ParseName(c, jp + ".decode", decode, &l->decode));
  if (l->source != LabelSource::kField && l->decode != LabelDecode::kAuto) {
    return c.Error(jp + ".decode", "decode applies to \"field\" labels only; source " + Quote(source) + " has none");
  }
  return Status::Ok();
}

Status CheckEventName(const Checker& c, const std::string& jp, const std::string& event, bool profile = false) {
  if (IsClockEvent(event) && !profile) {
    return c.Error(jp, Quote(event) +
                           " is a perf software clock, for a CPU profile (a \"profiles\" entry); a metric "
                           "counts a tracepoint (\"system:event\") or a probe");
  }
  if (IsProbeEvent(event)) {
    for (unsigned char ch : event) {
      if (ch < ' ' || ch == 0x7f) return c.Error(jp, Quote(event) + " holds a control character");
    }
    auto ref = ParseProbeRef(event);
    return ref.ok() ? Status::Ok() : c.Error(jp, ref.status().message());
  }
  // tracefs names: events/<system>/<event>, each a plain file name (no '/', '.', '..', spaces).
  const size_t colon = event.find(':');
  bool ok = colon != std::string::npos && colon > 0 && colon + 1 < event.size() &&
            event.find(':', colon + 1) == std::string::npos;
  for (unsigned char ch : event) ok = ok && ch > ' ' && ch < 0x7f && ch != '/';
  if (ok) {
    const std::string system = event.substr(0, colon), name = event.substr(colon + 1);
    ok = system != "." && system != ".." && name != "." && name != "..";
  }
  if (!ok) {
    return c.Error(jp, Quote(event) +
                           " is not of the form \"system:event\" (e.g. \"sched:sched_switch\") nor a probe (" +
                           ProbePrefixList() + ")" + (profile ? " nor a clock (\"cpu-clock\", \"task-clock\")" : ""));
  }
  return Status::Ok();
}

// A CPU profile's sampling: "frequency_hz" or "period", "include_idle". A clock event has no
// fields: no filter, value, args, pid or maxactive.
Status ParseClockSampling(const Checker& c, const json& j, const std::string& jp, MetricConfig* m) {
  for (const char* key : {"filter", "value", "args", "pid", "maxactive"}) {
    if (j.contains(key)) {
      return c.Error(jp + "." + key,
                     Quote(key) + " is for tracepoints and probes; " + Quote(m->event) +
                         " is a perf software clock with no fields (a CPU profile samples every "
                         "task on every CPU; use labels such as comm, pid or cgroup to tell them apart)");
    }
  }
  if (j.contains("frequency_hz") && j.contains("period")) {
    return c.Error(jp,
                   "give \"frequency_hz\" (samples per second on each CPU) or \"period\" (ns of the clock "
                   "between samples), not both");
  }
  TPE_RETURN_IF_ERROR(c.GetWhole(j, jp, "frequency_hz", 1, kMaxProfileFrequencyHz, &m->frequency_hz));
  TPE_RETURN_IF_ERROR(c.GetWhole(j, jp, "period", kMinProfilePeriodNs, kMaxProfilePeriodNs, &m->period_ns));
  if (m->frequency_hz == 0 && m->period_ns == 0) m->frequency_hz = kDefaultProfileFrequencyHz;
  if (auto it = j.find("include_idle"); it != j.end()) {
    if (!it->is_boolean()) {
      return c.Error(jp + ".include_idle", "must be true or false, not " + std::string(it->type_name()));
    }
    m->include_idle = it->get<bool>();
  }
  return Status::Ok();
}

// An off-CPU profile: its event is sched:sched_switch (said or not), no filter or value (every
// switch pairs a task's switch-out with its switch-in), "min_block_seconds".
Status ParseOffCpu(const Checker& c, const json& j, const std::string& jp, MetricConfig* m) {
  if (!m->event.empty() && m->event != kOffCpuEvent) {
    return c.Error(jp + ".event", "an off_cpu profile is made of " + std::string(kOffCpuEvent) + ", not " +
                                      Quote(m->event) + " (leave \"event\" out)");
  }
  m->event = kOffCpuEvent;
  for (const char* key : {"filter", "value", "frequency_hz", "period", "include_idle"}) {
    if (j.contains(key)) {
      return c.Error(jp + "." + key, Quote(key) +
                                         " does not apply to an off_cpu profile (every task's switches are paired; "
                                         "use labels such as comm, pid or cgroup to tell tasks apart)");
    }
  }
  TPE_RETURN_IF_ERROR(c.GetNumber(j, jp, "min_block_seconds", false, &m->min_block_seconds));
  if (!(m->min_block_seconds >= 0 && m->min_block_seconds <= kMaxMinBlockSeconds)) {
    return c.Error(jp + ".min_block_seconds",
                   Num(m->min_block_seconds) + " is out of range 0.." + Num(kMaxMinBlockSeconds) + " (seconds)");
  }
  return Status::Ok();
}

// "args" of a probe event: an object of field name -> "argN[:TYPE]" | "retval[:TYPE]".
Status ParseArgs(const Checker& c, const json& j, const std::string& jp, const std::string& event,
                 std::vector<std::pair<std::string, std::string>>* out) {
  auto it = j.find("args");
  if (it == j.end()) return Status::Ok();
  if (!IsProbeEvent(event)) {
    return c.Error(jp + ".args", "args are for probe events (" + ProbePrefixList() + "); " + Quote(event) +
                                     " is a tracepoint, whose fields are in its format");
  }
  if (!it->is_object()) return c.Error(jp + ".args", "must be an object like {\"size\": \"arg1:u64\"}");
  auto ref = ParseProbeRef(event);
  if (!ref.ok()) return c.Error(jp + ".event", ref.status().message());
  for (auto a = it->begin(); a != it->end(); ++a) {
    const std::string ap = jp + ".args" + KeySegment(a.key(), false);
    if (!a->is_string()) return c.Error(ap, "must be a string like \"arg0:u64\" or \"retval:s32\"");
    const std::string& spec = a->get_ref<const std::string&>();
    auto arg = ParseProbeArg(*ref, a.key(), spec);
    if (!arg.ok()) return c.Error(ap, arg.status().message());
    out->emplace_back(a.key(), spec);
  }
  return Status::Ok();
}

// "pid" of a uprobe or USDT probe: only that process's hits.
Status ParsePid(const Checker& c, const json& j, const std::string& jp, const std::string& event, int* pid) {
  if (j.find("pid") == j.end()) return Status::Ok();
  const std::optional<ProbePrefix> prefix = ProbePrefixOf(event);
  if (prefix != ProbePrefix::kUprobe && prefix != ProbePrefix::kUretprobe && prefix != ProbePrefix::kUsdt) {
    return c.Error(jp + ".pid",
                   "\"pid\" limits a uprobe, uretprobe or usdt probe to one process; " + Quote(event) + " is not one");
  }
  uint64_t v = 0;  // PID_MAX_LIMIT (include/linux/threads.h) is 4194304
  TPE_RETURN_IF_ERROR(c.GetWhole(j, jp, "pid", 1, 4194304, &v));
  *pid = static_cast<int>(v);
  return Status::Ok();
}

// "maxactive" of a kretprobe: the calls in flight whose return is caught (MAXACTIVE).
Status ParseMaxactive(const Checker& c, const json& j, const std::string& jp, const std::string& event,
                      uint32_t* maxactive) {
  if (j.find("maxactive") == j.end()) return Status::Ok();
  if (ProbePrefixOf(event) != ProbePrefix::kKretprobe) {
    return c.Error(jp + ".maxactive",
                   "\"maxactive\" (calls in flight whose return is caught) is for kretprobe: "
                   "events; " +
                       Quote(event) + " is not one");
  }
  uint64_t v = 0;  // KRETPROBE_MAXACTIVE_MAX (kernel/trace/trace_kprobe.c) is 4096
  TPE_RETURN_IF_ERROR(c.GetWhole(j, jp, "maxactive", 1, 4096, &v));
  *maxactive = static_cast<uint32_t>(v);
  return Status::Ok();
}

Status ParseEndpoint(const Checker& c, const json& j, const std::string& jp, EndpointConfig* e) {
  if (!j.is_object())
    return c.Error(jp, "must be an object like {\"event\": \"sched:sched_waking\", \"key\": [\"pid\"]}");
  TPE_RETURN_IF_ERROR(c.OnlyKeys(j, jp, {"event", "key", "filter", "args", "pid", "maxactive"}));
  TPE_RETURN_IF_ERROR(c.GetString(j, jp, "event", true, &e->event));
  TPE_RETURN_IF_ERROR(CheckEventName(c, jp + ".event", e->event));
  TPE_RETURN_IF_ERROR(ParseArgs(c, j, jp, e->event, &e->args));
  TPE_RETURN_IF_ERROR(ParsePid(c, j, jp, e->event, &e->pid));
  TPE_RETURN_IF_ERROR(ParseMaxactive(c, j, jp, e->event, &e->maxactive));
  TPE_RETURN_IF_ERROR(c.GetFilter(j, jp, &e->filter));
  e->json_path = jp;
  auto key = j.find("key");
  if (key == j.end())
    return c.Error(jp, "missing required key \"key\" (the fields that match start to end, e.g. [\"pid\"])");
  if (!key->is_array() || key->empty() || key->size() > 4) {
    return c.Error(jp + ".key", "must be an array of 1 to 4 field names");
  }
  for (size_t i = 0; i < key->size(); ++i) {
    const std::string kp = jp + ".key[" + std::to_string(i) + "]";
    if (!(*key)[i].is_string()) return c.Error(kp, "must be a field name (a string)");
    const std::string& field = (*key)[i].get_ref<const std::string&>();
    TPE_RETURN_IF_ERROR(c.CheckText(kp, field, Text::kName));
    e->key.push_back(field);
  }
  return Status::Ok();
}

// What pairs starts with ends (a latency, an inflight gauge): keys of as many fields on every
// side, and the "max_inflight" and "timeout_seconds" of `j`.
Status ParsePairing(const Checker& c, const json& j, const std::string& jp, MetricConfig* m) {
  for (const auto& s : m->starts) {
    if (s.key.size() != m->end.key.size()) {
      return c.Error(s.json_path + ".key", "has " + std::to_string(s.key.size()) + " fields but end.key has " +
                                               std::to_string(m->end.key.size()) + "; start and end keys must match");
    }
  }
  TPE_RETURN_IF_ERROR(c.GetWhole(j, jp, "max_inflight", 1, kMaxInflight, &m->max_inflight));
  TPE_RETURN_IF_ERROR(c.GetNumber(j, jp, "timeout_seconds", false, &m->timeout_seconds));
  if (!(m->timeout_seconds >= kMinTimeoutSeconds && m->timeout_seconds <= kMaxTimeoutSeconds)) {
    return c.Error(jp + ".timeout_seconds",
                   "must be a number of seconds from 0.000001 to 86400 (1 day), not " + Num(m->timeout_seconds));
  }
  return Status::Ok();
}

Status ParseLatency(const Checker& c, const json& j, const std::string& jp, MetricConfig* m) {
  auto start = j.find("start");
  if (start == j.end())
    return c.Error(jp, "missing required key \"start\" (e.g. {\"event\": \"sched:sched_waking\", \"key\": [\"pid\"]})");
  if (start->is_array()) {
    if (start->empty()) return c.Error(jp + ".start", "must not be an empty array");
    for (size_t i = 0; i < start->size(); ++i) {
      EndpointConfig e;
      TPE_RETURN_IF_ERROR(ParseEndpoint(c, (*start)[i], jp + ".start[" + std::to_string(i) + "]", &e));
      m->starts.push_back(std::move(e));
    }
  } else {
    EndpointConfig e;
    TPE_RETURN_IF_ERROR(ParseEndpoint(c, *start, jp + ".start", &e));
    m->starts.push_back(std::move(e));
  }
  auto end = j.find("end");
  if (end == j.end())
    return c.Error(jp,
                   "missing required key \"end\" (e.g. {\"event\": \"sched:sched_switch\", \"key\": [\"next_pid\"]})");
  TPE_RETURN_IF_ERROR(ParseEndpoint(c, *end, jp + ".end", &m->end));
  return ParsePairing(c, j, jp, m);
}

// Labels of `j[key]` (an array) into *out; names unique.
Status ParseLabelArray(const Checker& c, const json& arr, const std::string& jp, std::vector<LabelConfig>* out) {
  if (!arr.is_array()) return c.Error(jp, "must be an array of label objects");
  std::set<std::string> seen;
  for (size_t i = 0; i < arr.size(); ++i) {
    LabelConfig l;
    const std::string lp = jp + "[" + std::to_string(i) + "]";
    TPE_RETURN_IF_ERROR(ParseLabel(c, arr[i], lp, false, &l));
    if (!seen.insert(l.name).second) return c.Error(lp + ".name", "duplicate label name \"" + l.name + "\"");
    out->push_back(std::move(l));
  }
  return Status::Ok();
}

// An up or down side of a gauge: {"event", "filter", "value", "labels"}.
Status ParseGaugeSide(const Checker& c, const json& j, const std::string& jp, GaugeSideConfig* side) {
  if (!j.is_object()) return c.Error(jp, "must be an object like {\"event\": \"sock:inet_sock_set_state\"}");
  TPE_RETURN_IF_ERROR(c.OnlyKeys(j, jp, {"event", "filter", "value", "labels"}));
  TPE_RETURN_IF_ERROR(c.GetString(j, jp, "event", true, &side->event));
  TPE_RETURN_IF_ERROR(CheckEventName(c, jp + ".event", side->event));
  TPE_RETURN_IF_ERROR(c.GetFilter(j, jp, &side->filter));
  side->json_path = jp;
  if (auto v = j.find("value"); v != j.end()) {
    if (!v->is_object()) return c.Error(jp + ".value", "must be an object like {\"field\": \"len\", \"scale\": 1}");
    TPE_RETURN_IF_ERROR(c.OnlyKeys(*v, jp + ".value", {"field", "scale"}));
    TPE_RETURN_IF_ERROR(c.GetString(*v, jp + ".value", "field", true, &side->value.field));
    TPE_RETURN_IF_ERROR(c.GetNumber(*v, jp + ".value", "scale", false, &side->value.scale));
    if (!(side->value.scale != 0)) return c.Error(jp + ".value.scale", "must be a finite non-zero number");
  }
  if (auto l = j.find("labels"); l != j.end()) {
    side->has_labels = true;
    TPE_RETURN_IF_ERROR(ParseLabelArray(c, *l, jp + ".labels", &side->labels));
  }
  return Status::Ok();
}

// type gauge (collectors/gauge.h): exactly one of "inflight", "up" + "down", "max", "min", "last".
Status ParseGauge(const Checker& c, const json& j, const std::string& jp, MetricConfig* m) {
  // The key that makes a gauge of each kind: its name, but "up" (beside "down") for updown.
  auto key_of = [](const EnumName<GaugeKind>& k) {
    return k.value == GaugeKind::kUpDown ? std::string("up") : std::string(k.name);
  };
  std::vector<const EnumName<GaugeKind>*> kinds;
  for (const EnumName<GaugeKind>& k : kGaugeKindNames) {
    if (j.contains(key_of(k))) kinds.push_back(&k);
  }
  if (j.contains("down") && !j.contains("up")) return c.Error(jp + ".down", "needs \"up\" beside it");
  if (kinds.size() != 1) {
    return c.Error(jp,
                   "a gauge takes exactly one of \"inflight\": {\"start\", \"end\"}, \"up\" + \"down\", "
                   "\"max\", \"min\", \"last\" (found " +
                       std::to_string(kinds.size()) + ")");
  }
  m->gauge = kinds[0]->value;
  const std::string kind = key_of(*kinds[0]);
  if (m->gauge != GaugeKind::kInflight) {
    for (const char* k : {"max_inflight", "timeout_seconds"}) {
      if (j.contains(k)) return c.Error(jp + "." + k, "is for an inflight gauge");
    }
  }
  if (m->gauge == GaugeKind::kInflight) {
    const json& in = j["inflight"];
    if (!in.is_object()) return c.Error(jp + ".inflight", "must be an object {\"start\": {...}, \"end\": {...}}");
    TPE_RETURN_IF_ERROR(c.OnlyKeys(in, jp + ".inflight", {"start", "end"}));
    for (const char* k : {"start", "end"}) {
      if (!in.contains(k)) return c.Error(jp + ".inflight", std::string("missing required key \"") + k + "\"");
    }
    EndpointConfig start;
    TPE_RETURN_IF_ERROR(ParseEndpoint(c, in["start"], jp + ".inflight.start", &start));
    m->starts.push_back(std::move(start));
    TPE_RETURN_IF_ERROR(ParseEndpoint(c, in["end"], jp + ".inflight.end", &m->end));
    return ParsePairing(c, j, jp, m);
  }
  if (m->gauge == GaugeKind::kUpDown) {
    if (!j.contains("down")) return c.Error(jp + ".up", "needs \"down\" beside it");
    TPE_RETURN_IF_ERROR(ParseGaugeSide(c, j["up"], jp + ".up", &m->up));
    TPE_RETURN_IF_ERROR(ParseGaugeSide(c, j["down"], jp + ".down", &m->down));
    return Status::Ok();
  }
  // max, min, last: {"event", "field", "scale", "filter"}.
  const json& e = j[kind];
  const std::string ep = jp + "." + kind;
  if (!e.is_object()) return c.Error(ep, "must be an object like {\"event\": \"...\", \"field\": \"...\"}");
  TPE_RETURN_IF_ERROR(c.OnlyKeys(e, ep, {"event", "field", "scale", "filter"}));
  TPE_RETURN_IF_ERROR(c.GetString(e, ep, "event", true, &m->event));
  TPE_RETURN_IF_ERROR(CheckEventName(c, ep + ".event", m->event));
  TPE_RETURN_IF_ERROR(c.GetFilter(e, ep, &m->filter));
  TPE_RETURN_IF_ERROR(c.GetString(e, ep, "field", true, &m->value.field));
  TPE_RETURN_IF_ERROR(c.GetNumber(e, ep, "scale", false, &m->value.scale));
  if (!(m->value.scale != 0)) return c.Error(ep + ".scale", "must be a finite non-zero number");
  return Status::Ok();
}

// Native buckets' options (collectors/native_buckets.h) from `j` at `jp`.
Status ParseNative(const Checker& c, const json& j, const std::string& jp, BucketsConfig* b) {
  b->native = true;
  TPE_RETURN_IF_ERROR(c.GetWhole(j, jp, "schema", NativeOptions::kMinSchema, NativeOptions::kMaxSchema, &b->schema));
  TPE_RETURN_IF_ERROR(c.GetNumber(j, jp, "zero_threshold", false, &b->zero_threshold));
  if (!(b->zero_threshold >= 0)) {
    return c.Error(jp + ".zero_threshold",
                   "must be a number >= 0 (values of at most this magnitude share the zero "
                   "bucket), not " +
                       Num(b->zero_threshold));
  }
  return c.GetWhole(j, jp, "max_buckets", 1, NativeOptions::kMaxMaxBuckets, &b->max_buckets);
}

Status ParseBuckets(const Checker& c, const json& j, const std::string& jp, BucketsConfig* b) {
  auto it = j.find("buckets");
  const std::string bp = jp + ".buckets";
  if (it == j.end())
    return c.Error(jp, "missing required key \"buckets\" (e.g. {\"type\": \"exp2\", \"min\": 1, \"max\": 65536})");
  if (!it->is_object()) return c.Error(bp, "must be an object");
  b->json_path = bp;
  std::string type;
  TPE_RETURN_IF_ERROR(c.GetString(*it, bp, "type", true, &type));
  TPE_RETURN_IF_ERROR(ParseName(c, bp + ".type", type, &b->type));
  StatusOr<Buckets> built = InvalidArgument("");
  if (b->type == BucketType::kExp2) {
    TPE_RETURN_IF_ERROR(c.OnlyKeys(*it, bp, {"type", "min", "max"}));
    TPE_RETURN_IF_ERROR(c.GetNumber(*it, bp, "min", true, &b->min));
    TPE_RETURN_IF_ERROR(c.GetNumber(*it, bp, "max", true, &b->max));
    if (!(b->min > 0)) return c.Error(bp + ".min", "must be greater than 0, not " + Num(b->min));
    if (!(b->max > b->min)) {
      return c.Error(bp + ".max", "must be greater than min (" + Num(b->min) + "), not " + Num(b->max));
    }
    // The bounds min, 2·min, ... up to the first >= max, as Buckets::Exp2 makes them.
    size_t n = 0;
    for (double v = b->min;; v *= 2) {
      if (++n > kMaxBuckets) {
        return c.Error(bp, "exp2 from " + Num(b->min) + " to " + Num(b->max) + " makes more than " +
                               std::to_string(kMaxBuckets) + " buckets; max/min must be at most 2^" +
                               std::to_string(kMaxBuckets - 1));
      }
      if (!std::isfinite(v)) {
        return c.Error(bp + ".max",
                       "the bounds min*2^k overflow before reaching " + Num(b->max) + "; use a smaller max");
      }
      if (v >= b->max) break;
    }
    built = Buckets::Exp2(b->min, b->max);
  } else if (b->type == BucketType::kLinear) {
    TPE_RETURN_IF_ERROR(c.OnlyKeys(*it, bp, {"type", "start", "width", "count"}));
    TPE_RETURN_IF_ERROR(c.GetNumber(*it, bp, "start", true, &b->start));
    TPE_RETURN_IF_ERROR(c.GetNumber(*it, bp, "width", true, &b->width));
    if (!it->contains("count")) return c.Error(bp, "missing required key \"count\"");
    TPE_RETURN_IF_ERROR(c.GetWhole(*it, bp, "count", 1, kMaxBuckets, &b->count));
    if (!(b->width > 0)) return c.Error(bp + ".width", "must be greater than 0, not " + Num(b->width));
    // The bounds start + width·i, as Buckets::Linear makes them: finite and strictly increasing.
    double prev = 0;
    for (uint64_t i = 0; i < b->count; ++i) {
      const double v = b->start + b->width * static_cast<double>(i);
      const std::string name = "start + width*" + std::to_string(i);
      if (!std::isfinite(v)) return c.Error(bp, name + " is not a finite number; use a smaller start, width or count");
      if (i > 0 && !(v > prev)) {
        return c.Error(bp, name + " is not greater than start + width*" + std::to_string(i - 1) + " (both " + Num(v) +
                               ") in double precision; bounds must be strictly increasing: use a larger width or a "
                               "smaller start");
      }
      prev = v;
    }
    built = Buckets::Linear(b->start, b->width, b->count);
  } else if (b->type == BucketType::kExplicit) {
    TPE_RETURN_IF_ERROR(c.OnlyKeys(*it, bp, {"type", "bounds"}));
    auto bounds = it->find("bounds");
    if (bounds == it->end() || !bounds->is_array())
      return c.Error(bp + ".bounds", "must be an array of increasing numbers");
    if (bounds->empty()) {
      return c.Error(bp + ".bounds",
                     "must not be empty (1 to " + std::to_string(kMaxBuckets) + " strictly increasing numbers)");
    }
    if (bounds->size() > kMaxBuckets) {
      return c.Error(bp + ".bounds",
                     "has " + std::to_string(bounds->size()) + " bounds; at most " + std::to_string(kMaxBuckets));
    }
    for (size_t i = 0; i < bounds->size(); ++i) {
      const json& v = (*bounds)[i];
      const std::string ip = bp + ".bounds[" + std::to_string(i) + "]";
      if (!v.is_number() || !std::isfinite(v.get<double>())) return c.Error(ip, "must be a number");
      b->bounds.push_back(v.get<double>());
      if (i > 0 && !(b->bounds[i] > b->bounds[i - 1])) {
        return c.Error(ip, Num(b->bounds[i]) + " is not greater than bounds[" + std::to_string(i - 1) + "] (" +
                               Num(b->bounds[i - 1]) + "); bounds must be strictly increasing");
      }
    }
    built = Buckets::Explicit(b->bounds);
  } else {  // BucketType::kNative
    TPE_RETURN_IF_ERROR(c.OnlyKeys(*it, bp, {"type", "schema", "zero_threshold", "max_buckets"}));
    TPE_RETURN_IF_ERROR(ParseNative(c, *it, bp, b));
    built = Buckets::None();
  }
  // The collectors' own check, so that what passes here is what the plan accepts.
  if (!built.ok()) return c.Error(bp, built.status().message());
  auto native = j.find("native");
  if (native != j.end()) {
    const std::string np = jp + ".native";
    if (!b->classic()) {
      return c.Error(np, "is for classic buckets (exp2, linear, explicit); buckets of type native are native already");
    }
    if (native->is_boolean()) {
      b->native = native->get<bool>();
    } else if (native->is_object()) {
      TPE_RETURN_IF_ERROR(c.OnlyKeys(*native, np, {"schema", "zero_threshold", "max_buckets"}));
      TPE_RETURN_IF_ERROR(ParseNative(c, *native, np, b));
    } else {
      return c.Error(np, "must be true, false or an object {\"schema\", \"zero_threshold\", \"max_buckets\"}");
    }
  }
  return Status::Ok();
}

// A "metrics" entry, or with `profile` a "profiles" entry (no "type": it is "profile").
Status ParseMetric(const Checker& c, const json& j, const std::string& jp, MetricConfig* m, bool profile = false) {
  if (!j.is_object()) return c.Error(jp, profile ? "a profile must be an object" : "a metric must be an object");
  if (profile) {
    m->type = MetricType::kProfile;
  } else {
    std::string type;
    TPE_RETURN_IF_ERROR(c.GetString(j, jp, "type", true, &type));
    TPE_RETURN_IF_ERROR(ParseName(c, jp + ".type", type, &m->type, {MetricType::kProfile}));
  }
  const bool latency = m->type == MetricType::kLatency;
  if (profile) {
    TPE_RETURN_IF_ERROR(
        c.OnlyKeys(j, jp,
                   {"name", "help", "type", "event", "filter", "stack", "unwind", "labels", "value", "engine", "args",
                    "pid", "maxactive", "frequency_hz", "period", "include_idle", "min_block_seconds"}));
    ProfileKind kind = ProfileKind::kProfile;  // "type" absent
    if (j.contains("type")) {
      std::string name;
      TPE_RETURN_IF_ERROR(c.GetString(j, jp, "type", true, &name));
      TPE_RETURN_IF_ERROR(ParseName(c, jp + ".type", name, &kind));
    }
    m->off_cpu = kind == ProfileKind::kOffCpu;
    std::string stack;  // "" or absent: both
    TPE_RETURN_IF_ERROR(c.GetString(j, jp, "stack", false, &stack));
    m->stack = ProfileStack::kBoth;
    if (!stack.empty()) TPE_RETURN_IF_ERROR(ParseName(c, jp + ".stack", stack, &m->stack));
    std::string unwind;  // "" or absent: not given
    TPE_RETURN_IF_ERROR(c.GetString(j, jp, "unwind", false, &unwind));
    m->unwind_given = !unwind.empty();
    if (m->stack == ProfileStack::kKernel) {
      if (m->unwind_given) {
        return c.Error(jp + ".unwind",
                       "is for user stacks; this profile takes the kernel's stack only "
                       "(\"stack\": \"kernel\"), which the kernel walks itself");
      }
    } else if (!m->unwind_given) {
      m->unwind = UnwindMethod::kDwarf;
    } else {
      TPE_RETURN_IF_ERROR(ParseName(c, jp + ".unwind", unwind, &m->unwind));
    }
  } else if (m->type == MetricType::kCounter) {
    TPE_RETURN_IF_ERROR(c.OnlyKeys(
        j, jp, {"name", "help", "type", "event", "filter", "labels", "value", "engine", "args", "pid", "maxactive"}));
  } else if (m->type == MetricType::kHistogram) {
    TPE_RETURN_IF_ERROR(c.OnlyKeys(j, jp,
                                   {"name", "help", "type", "event", "filter", "labels", "value", "buckets", "native",
                                    "engine", "args", "pid", "maxactive"}));
  } else if (latency) {
    TPE_RETURN_IF_ERROR(c.OnlyKeys(j, jp,
                                   {"name", "help", "type", "start", "end", "labels", "buckets", "native",
                                    "max_inflight", "timeout_seconds", "engine"}));
  } else {  // MetricType::kGauge
    TPE_RETURN_IF_ERROR(c.OnlyKeys(j, jp,
                                   {"name", "help", "type", "inflight", "up", "down", "max", "min", "last", "labels",
                                    "max_inflight", "timeout_seconds", "engine"}));
  }
  const bool gauge = m->type == MetricType::kGauge;
  TPE_RETURN_IF_ERROR(c.GetString(j, jp, "name", true, &m->name));
  TPE_RETURN_IF_ERROR(c.GetString(j, jp, "help", false, &m->help, Text::kProse));
  std::string engine;  // "" or absent: auto
  TPE_RETURN_IF_ERROR(c.GetString(j, jp, "engine", false, &engine));
  if (!engine.empty()) TPE_RETURN_IF_ERROR(ParseName(c, jp + ".engine", engine, &m->engine));
  if (!latency && !gauge) {
    TPE_RETURN_IF_ERROR(c.GetString(j, jp, "event", !m->off_cpu, &m->event));
    TPE_RETURN_IF_ERROR(c.GetFilter(j, jp, &m->filter));
  }
  m->json_path = jp;
  if (!IsValidMetricName(m->name)) {
    return c.Error(jp + ".name", Quote(m->name) + " is not a valid metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)");
  }
  if (m->name.starts_with("tracepoint_exporter_") || m->name.starts_with("process_")) {
    return c.Error(jp + ".name",
                   "\"" + m->name + "\": the prefixes tracepoint_exporter_ and process_ are reserved for self-metrics");
  }
  if (!profile && m->type == MetricType::kCounter && !m->name.ends_with("_total")) {
    return c.Error(jp + ".name", "counter \"" + m->name + "\" must end in _total (e.g. \"" + m->name + "_total\")");
  }
  if (!profile && m->type != MetricType::kCounter && m->name.ends_with("_total")) {
    return c.Error(jp + ".name", Name(m->type) + " \"" + m->name + "\" must not end in _total (reserved for counters)");
  }
  if (latency && !m->name.ends_with("_seconds")) {
    return c.Error(jp + ".name", "latency \"" + m->name + "\" is in seconds and must end in _seconds");
  }
  if (m->off_cpu) {
    TPE_RETURN_IF_ERROR(ParseOffCpu(c, j, jp, m));
  } else if (j.contains("min_block_seconds")) {
    return c.Error(jp + ".min_block_seconds", "is for an off-CPU profile (\"type\": \"off_cpu\")");
  }
  if (profile && IsClockEvent(m->event)) {
    TPE_RETURN_IF_ERROR(ParseClockSampling(c, j, jp, m));
  } else if (!latency && !gauge) {
    for (const char* key : {"frequency_hz", "period", "include_idle"}) {
      if (j.contains(key)) {
        return c.Error(jp + "." + key, Quote(key) +
                                           " is for a CPU profile (\"event\": \"cpu-clock\" or \"task-clock\"); " +
                                           Quote(m->event) + " is sampled at every hit");
      }
    }
    TPE_RETURN_IF_ERROR(CheckEventName(c, jp + ".event", m->event, profile));
    TPE_RETURN_IF_ERROR(ParseArgs(c, j, jp, m->event, &m->args));
    TPE_RETURN_IF_ERROR(ParsePid(c, j, jp, m->event, &m->pid));
    TPE_RETURN_IF_ERROR(ParseMaxactive(c, j, jp, m->event, &m->maxactive));
  } else if (latency) {
    TPE_RETURN_IF_ERROR(ParseLatency(c, j, jp, m));
  } else {
    TPE_RETURN_IF_ERROR(ParseGauge(c, j, jp, m));
  }
  if (m->help.empty() && gauge) {
    m->help = m->gauge == GaugeKind::kInflight ? m->starts[0].event + " waiting for " + m->end.event
              : m->gauge == GaugeKind::kUpDown
                  ? m->up.event + " up, " + m->down.event + " down"
                  : Name(m->gauge) + " of " + m->event + " " + m->value.field + " since the last scrape";
  }
  if (m->help.empty())
    m->help = (latency ? m->starts[0].event + " to " + m->end.event : m->event) + " " + Name(m->type);
  if (m->off_cpu && !j.contains("help")) m->help = "off-CPU time by stack (sched:sched_switch)";
  // histogram: required; counter, profile: optional (adds field x scale per event instead of 1).
  if (auto v = j.find("value");
      m->type == MetricType::kHistogram || (!latency && !gauge && m->type != MetricType::kHistogram && v != j.end())) {
    if (v == j.end()) return c.Error(jp, "missing required key \"value\" (e.g. {\"field\": \"len\"})");
    if (!v->is_object()) return c.Error(jp + ".value", "must be an object like {\"field\": \"len\", \"scale\": 1}");
    TPE_RETURN_IF_ERROR(c.OnlyKeys(*v, jp + ".value", {"field", "scale"}));
    TPE_RETURN_IF_ERROR(c.GetString(*v, jp + ".value", "field", true, &m->value.field));
    TPE_RETURN_IF_ERROR(c.GetNumber(*v, jp + ".value", "scale", false, &m->value.scale));
    if (!(m->value.scale != 0) || !std::isfinite(m->value.scale)) {
      return c.Error(jp + ".value.scale", "must be a finite non-zero number");
    }
    if (m->type != MetricType::kHistogram && m->value.scale < 0) {
      return c.Error(jp + ".value.scale", "must be positive: a " + Name(m->type) + " never decreases");
    }
  }
  if (m->type == MetricType::kHistogram || latency) TPE_RETURN_IF_ERROR(ParseBuckets(c, j, jp, &m->buckets));
  auto labels = j.find("labels");
  if (labels != j.end()) {
    if (!labels->is_array()) return c.Error(jp + ".labels", "must be an array of label objects");
    std::set<std::string> seen;
    for (size_t i = 0; i < labels->size(); ++i) {
      LabelConfig l;
      std::string lp = jp + ".labels[" + std::to_string(i) + "]";
      TPE_RETURN_IF_ERROR(ParseLabel(c, (*labels)[i], lp, latency || m->gauge == GaugeKind::kInflight, &l));
      if (m->gauge == GaugeKind::kInflight && l.from != LabelFrom::kStart) {
        return c.Error(lp + ".from", "an inflight gauge's labels are read at the start (the end may never come)");
      }
      if (!seen.insert(l.name).second) return c.Error(lp + ".name", "duplicate label name \"" + l.name + "\"");
      // Histogram and latency series carry le="<bound>"; a second le would make
      // h_bucket{le="..",le=".."}, which Prometheus rejects. (A counter has no buckets: there le is
      // an ordinary label, as client_golang allows. quantile is only reserved for summaries.)
      if ((m->type == MetricType::kHistogram || latency) && l.name == "le") {
        return c.Error(lp + ".name",
                       "\"le\" is reserved for the bucket bound of histogram and latency series; choose another name");
      }
      m->labels.push_back(std::move(l));
    }
  }
  return Status::Ok();
}

}  // namespace

bool IsValidMetricName(const std::string& s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char ch = s[i];
    bool ok = std::isalpha(static_cast<unsigned char>(ch)) || ch == '_' || ch == ':' ||
              (i > 0 && std::isdigit(static_cast<unsigned char>(ch)));
    if (!ok) return false;
  }
  return true;
}

bool IsValidLabelName(const std::string& s) {
  if (s.empty() || s.starts_with("__")) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char ch = s[i];
    bool ok = std::isalpha(static_cast<unsigned char>(ch)) || ch == '_' ||
              (i > 0 && std::isdigit(static_cast<unsigned char>(ch)));
    if (!ok) return false;
  }
  return true;
}

namespace {

// MetricConfig::canonical: every field that changes what the metric counts or exports, defaults
// filled in (absent "scale" is 1, a single start is an array of one, ...) and numbers as doubles
// (64, 64.0 and 6.4e1 are the same), object keys sorted by nlohmann; json_path is left out (moving
// a metric in the list does not change it). Of the settings, those a collector is built with:
// ring_buffer_pages is not (rings belong to the pipeline, rebuilt on every reload).
std::string Canonical(const MetricConfig& m, const Settings& s) {
  json labels = json::array();
  for (const LabelConfig& l : m.labels) {
    labels.push_back({{"name", l.name},
                      {"field", l.field},
                      {"source", Name(l.source)},
                      {"decode", Name(l.decode)},
                      {"from", Name(l.from)}});
  }
  auto endpoint = [](const EndpointConfig& e) {
    return json{{"event", e.event}, {"key", e.key}, {"filter", e.filter},
                {"args", e.args},   {"pid", e.pid}, {"maxactive", e.maxactive}};
  };
  json starts = json::array();
  for (const EndpointConfig& e : m.starts) starts.push_back(endpoint(e));
  auto gauge_side = [&](const GaugeSideConfig& g) {
    json l = json::array();
    for (const LabelConfig& lc : g.labels) l.push_back({lc.name, lc.field, Name(lc.source), Name(lc.decode)});
    return json{{"event", g.event},
                {"filter", g.filter},
                {"value", {{"field", g.value.field}, {"scale", g.value.scale}}},
                {"labels", l},
                {"has_labels", g.has_labels}};
  };
  const BucketsConfig& b = m.buckets;
  const json j = {
      {"name", m.name},
      {"help", m.help},
      {"type", Name(m.type)},
      {"engine", Name(m.engine)},
      {"event", m.event},
      {"args", m.args},
      {"pid", m.pid},
      {"maxactive", m.maxactive},
      {"filter", m.filter},
      {"labels", labels},
      {"value", {{"field", m.value.field}, {"scale", m.value.scale}}},
      {"buckets",
       {{"type", Name(b.type)},
        {"min", b.min},
        {"max", b.max},
        {"start", b.start},
        {"width", b.width},
        {"count", b.count},
        {"bounds", b.bounds},
        {"native", b.native},
        {"schema", b.schema},
        {"zero_threshold", b.zero_threshold},
        {"max_buckets", b.max_buckets}}},
      {"start", starts},
      {"end", endpoint(m.end)},
      {"gauge", Name(m.gauge)},
      {"up", gauge_side(m.up)},
      {"down", gauge_side(m.down)},
      {"max_inflight", m.max_inflight},
      {"timeout_seconds", m.timeout_seconds},
      {"stack", Name(m.stack)},
      {"unwind", Name(m.unwind)},
      {"frequency_hz", m.frequency_hz},
      {"period", m.period_ns},
      {"include_idle", m.include_idle},
      {"off_cpu", m.off_cpu},
      {"min_block_seconds", m.min_block_seconds},
      {"settings",
       {{"max_series_per_metric", s.max_series_per_metric},
        {"max_stacks_per_profile", m.type == MetricType::kProfile ? s.max_stacks_per_profile : 0},
        {"profile_max_frames", m.type == MetricType::kProfile ? s.profile_max_frames : 0},
        {"profile_stack_bytes",
         m.type == MetricType::kProfile && m.unwind == UnwindMethod::kDwarf ? s.profile_stack_bytes : 0},
        {"series_idle_timeout_seconds", s.series_idle_timeout_seconds},
        {"bpf_preallocate_max_bytes", s.bpf_preallocate_max_bytes}}},
  };
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// The metric names a metric puts in the exposition: its own, and for a histogram or latency
// metric the series prometheus-cpp writes for it (name_bucket, name_sum, name_count). A counter
// is written under its name as is (text format 0.0.4: no suffix added). The same suffix check
// as client_golang's registry.
std::vector<std::string> ExportedNames(const MetricConfig& m) {
  if (m.type == MetricType::kCounter || m.type == MetricType::kProfile || m.type == MetricType::kGauge) return {m.name};
  return {m.name, m.name + "_bucket", m.name + "_sum", m.name + "_count"};
}

std::string SeriesList(const MetricConfig& m) {
  return m.name + "_bucket, " + m.name + "_sum and " + m.name + "_count";
}

StatusOr<Config> ParseConfigUnchecked(const std::string& text, const std::string& path) {
  Checker c(path);
  if (text.size() > kMaxConfigBytes) {
    return InvalidArgument(path + ": " + std::to_string(text.size()) + " bytes; a config may have at most " +
                           std::to_string(kMaxConfigBytes) + " bytes (4 MiB)");
  }
  TreeBuilder builder;
  if (!json::sax_parse(text, &builder, json::input_format_t::json, /*strict=*/true, /*ignore_comments=*/true)) {
    return builder.Error(path, text);
  }
  const json& root = builder.root();
  if (!root.is_object())
    return c.Error("$", "the config must be a JSON object with \"metrics\" (and optional \"settings\")");
  TPE_RETURN_IF_ERROR(c.OnlyKeys(root, "$", {"settings", "metrics", "profiles"}));
  Config cfg;
  cfg.path = path;
  auto settings = root.find("settings");
  if (settings != root.end()) {
    if (!settings->is_object()) return c.Error("settings", "must be an object");
    TPE_RETURN_IF_ERROR(c.OnlyKeys(
        *settings, "settings",
        {"ring_buffer_pages", "max_series_per_metric", "series_idle_timeout_seconds", "bpf_cost_window_seconds",
         "bpf_cost_period_seconds", "bpf_preallocate_max_bytes", "max_pid_perf_events", "probe_refresh_seconds",
         "max_stacks_per_profile", "profile_max_frames", "profile_stack_bytes", "debuginfod_urls"}));
    uint64_t pages = cfg.settings.ring_buffer_pages;
    TPE_RETURN_IF_ERROR(c.GetWhole(*settings, "settings", "ring_buffer_pages", 1, 4096, &pages));
    if ((pages & (pages - 1)) != 0) {
      return c.Error("settings.ring_buffer_pages",
                     std::to_string(pages) + " is not a power of two (1, 2, 4, ..., 4096)");
    }
    cfg.settings.ring_buffer_pages = static_cast<uint32_t>(pages);
    TPE_RETURN_IF_ERROR(c.GetWhole(*settings, "settings", "max_series_per_metric", 1, kMaxSeriesPerMetric,
                                   &cfg.settings.max_series_per_metric));
    TPE_RETURN_IF_ERROR(c.GetWhole(*settings, "settings", "bpf_preallocate_max_bytes", 0, kMaxBpfPreallocateBytes,
                                   &cfg.settings.bpf_preallocate_max_bytes));
    double& idle = cfg.settings.series_idle_timeout_seconds;
    TPE_RETURN_IF_ERROR(c.GetNumber(*settings, "settings", "series_idle_timeout_seconds", false, &idle));
    if (!(idle == 0 || (idle >= kMinSeriesIdleTimeoutSeconds && idle <= kMaxSeriesIdleTimeoutSeconds))) {
      return c.Error(
          "settings.series_idle_timeout_seconds",
          "must be 0 (series never expire) or a number of seconds from 0.001 to 31536000 (365 days), not " + Num(idle));
    }
    idle = idle == 0 ? 0 : idle;  // -0 is 0
    double& window = cfg.settings.bpf_cost_window_seconds;
    double& period = cfg.settings.bpf_cost_period_seconds;
    TPE_RETURN_IF_ERROR(c.GetNumber(*settings, "settings", "bpf_cost_window_seconds", false, &window));
    TPE_RETURN_IF_ERROR(c.GetNumber(*settings, "settings", "bpf_cost_period_seconds", false, &period));
    if (!(period == 0 || (period >= kMinCostWindowSeconds && period <= kMaxCostPeriodSeconds))) {
      return c.Error("settings.bpf_cost_period_seconds",
                     "must be 0 (no cost windows) or a number of seconds from 0.01 to 86400, not " + Num(period));
    }
    period = period == 0 ? 0 : period;
    if (!(window >= kMinCostWindowSeconds && (period == 0 || window <= period))) {
      return c.Error("settings.bpf_cost_window_seconds",
                     "must be a number of seconds from 0.01 up to settings.bpf_cost_period_seconds (" + Num(period) +
                         "), not " + Num(window));
    }
    TPE_RETURN_IF_ERROR(c.GetWhole(*settings, "settings", "max_pid_perf_events", 1, kMaxPidPerfEvents,
                                   &cfg.settings.max_pid_perf_events));
    TPE_RETURN_IF_ERROR(c.GetWhole(*settings, "settings", "max_stacks_per_profile", 1, kMaxSeriesPerMetric,
                                   &cfg.settings.max_stacks_per_profile));
    TPE_RETURN_IF_ERROR(c.GetWhole(*settings, "settings", "profile_max_frames", 1, kMaxProfileFrames,
                                   &cfg.settings.profile_max_frames));
    TPE_RETURN_IF_ERROR(c.GetWhole(*settings, "settings", "profile_stack_bytes", kMinProfileStackBytes,
                                   kMaxProfileStackBytes, &cfg.settings.profile_stack_bytes));
    if (cfg.settings.profile_stack_bytes % 8 != 0) {
      return c.Error("settings.profile_stack_bytes", std::to_string(cfg.settings.profile_stack_bytes) +
                                                         " is not a multiple of 8 (bytes; e.g. 8192, perf's default)");
    }
    if (settings->contains("debuginfod_urls")) {
      std::string urls;
      TPE_RETURN_IF_ERROR(c.GetString(*settings, "settings", "debuginfod_urls", false, &urls));
      size_t at = 0;
      while (at < urls.size()) {
        const size_t end = std::min(urls.find(' ', at), urls.size());
        const std::string url = urls.substr(at, end - at);
        if (!url.empty() && !(url.starts_with("http://") || url.starts_with("https://"))) {
          return c.Error("settings.debuginfod_urls",
                         "\"" + url +
                             "\" is not an http:// or https:// URL (space-separated base URLs, as DEBUGINFOD_URLS; "
                             "e.g. \"https://debuginfod.debian.net\"; \"\" for none)");
        }
        at = end + 1;
      }
      cfg.settings.debuginfod_urls = urls;
    }
    double& refresh = cfg.settings.probe_refresh_seconds;
    TPE_RETURN_IF_ERROR(c.GetNumber(*settings, "settings", "probe_refresh_seconds", false, &refresh));
    if (!(refresh == 0 || (refresh >= 1 && refresh <= kMaxCostPeriodSeconds))) {
      return c.Error("settings.probe_refresh_seconds",
                     "must be 0 (only a reload looks at probed binaries) or a number of seconds from 1 to 86400, not " +
                         Num(refresh));
    }
    refresh = refresh == 0 ? 0 : refresh;
  }
  auto metrics = root.find("metrics");
  auto profiles = root.find("profiles");
  if (metrics == root.end() && profiles == root.end()) {
    return c.Error("$", "missing required key \"metrics\" (an array of metric objects) or \"profiles\"");
  }
  static const json kNone = json::array();
  const json& metric_list = metrics != root.end() ? *metrics : kNone;
  const json& profile_list = profiles != root.end() ? *profiles : kNone;
  if (!metric_list.is_array()) return c.Error("metrics", "must be an array of metric objects");
  if (!profile_list.is_array()) return c.Error("profiles", "must be an array of profile objects");
  if (metric_list.empty() && profile_list.empty()) {
    return c.Error(metrics != root.end() ? "metrics" : "profiles",
                   "must be a non-empty array (a config needs a metric or a profile)");
  }
  struct Owner {
    size_t metric;   // index into cfg.metrics
    bool generated;  // a series of a histogram/latency metric, not a metric's own name
  };
  std::map<std::string, Owner> exported;
  const size_t n_metrics = metric_list.size();
  for (size_t i = 0; i < n_metrics + profile_list.size(); ++i) {
    MetricConfig m;
    const bool profile = i >= n_metrics;
    std::string jp = profile ? "profiles[" + std::to_string(i - n_metrics) + "]" : "metrics[" + std::to_string(i) + "]";
    TPE_RETURN_IF_ERROR(ParseMetric(c, profile ? profile_list[i - n_metrics] : metric_list[i], jp, &m, profile));
    const std::vector<std::string> names = ExportedNames(m);
    for (size_t k = 0; k < names.size(); ++k) {
      auto found = exported.find(names[k]);
      if (found == exported.end()) continue;
      const MetricConfig& other = cfg.metrics[found->second.metric];
      if (k == 0 && !found->second.generated) {
        return c.Error(jp + ".name", "duplicate metric name \"" + m.name + "\"");
      }
      if (k == 0) {
        return c.Error(jp + ".name", "\"" + m.name + "\" collides with a series of " + Name(other.type) + " \"" +
                                         other.name + "\" at " + other.json_path + ".name (it exports " +
                                         SeriesList(other) + "); rename one of them");
      }
      return c.Error(jp + ".name", Name(m.type) + " \"" + m.name + "\" exports " + SeriesList(m) + "; \"" + names[k] +
                                       "\" collides with the " + Name(other.type) + " at " + other.json_path +
                                       ".name; rename one of them");
    }
    for (size_t k = 0; k < names.size(); ++k) exported.emplace(names[k], Owner{cfg.metrics.size(), k > 0});
    m.canonical = Canonical(m, cfg.settings);
    cfg.metrics.push_back(std::move(m));
  }
  return cfg;
}

std::string FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  return "of an unknown file type";
}

// The file's bytes: only a regular file, at most kMaxConfigBytes. O_NONBLOCK so that opening a
// FIFO does not wait for a writer (it is refused by the fstat that follows).
StatusOr<std::string> ReadConfigFile(const std::string& path) {
  const std::string context = "--config.file";
  const std::string too_large =
      "; a config file may have at most " + std::to_string(kMaxConfigBytes) + " bytes (4 MiB)";
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd.valid()) return ErrnoStatus(errno, "cannot open " + path).WithContext(context);
  struct stat st = {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, "cannot stat " + path).WithContext(context);
  if (!S_ISREG(st.st_mode)) {
    return InvalidArgument(context + ": " + path + ": " + FileKind(st.st_mode) +
                           ", not a regular file; the config must be a regular file of at most " +
                           std::to_string(kMaxConfigBytes) + " bytes");
  }
  if (st.st_size > static_cast<off_t>(kMaxConfigBytes)) {
    return InvalidArgument(context + ": " + path + ": " + std::to_string(st.st_size) + " bytes" + too_large);
  }
  // Read at most one byte more than the limit: the file may grow, or report size 0 (procfs).
  std::string text;
  char buf[65536];
  while (text.size() <= kMaxConfigBytes) {
    const size_t want = std::min(sizeof(buf), kMaxConfigBytes + 1 - text.size());
    const ssize_t n = ::read(fd.get(), buf, want);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "cannot read " + path).WithContext(context);
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  if (text.size() > kMaxConfigBytes) {
    return InvalidArgument(context + ": " + path + ": more than " + std::to_string(kMaxConfigBytes) + " bytes" +
                           too_large);
  }
  return text;
}

// The backstop at the load boundary: nothing above is meant to throw (nlohmann is called only
// where it cannot), but whatever does becomes an error naming the file.
template <typename F>
StatusOr<Config> NoExceptions(const std::string& path, F f) {
  try {
    return f();
  } catch (const json::exception& e) {
    return InvalidArgument(path + ": invalid config: " + Printable(e.what()));
  } catch (const std::exception& e) {
    return InvalidArgument(path + ": cannot read the config: " + Printable(e.what()));
  } catch (...) {
    return InvalidArgument(path + ": cannot read the config: unknown error");
  }
}

}  // namespace

StatusOr<Config> ParseConfig(const std::string& text, const std::string& path) {
  return NoExceptions(path, [&] { return ParseConfigUnchecked(text, path); });
}

StatusOr<Config> LoadConfig(const std::string& path) {
  return NoExceptions(path, [&]() -> StatusOr<Config> {
    TPE_ASSIGN_OR_RETURN(std::string text, ReadConfigFile(path));
    return ParseConfigUnchecked(text, path);
  });
}

}  // namespace tpe

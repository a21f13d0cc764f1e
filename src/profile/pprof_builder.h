// Builds a pprof profile (perftools.profiles.Profile, the schema Debian ships with
// golang-github-google-pprof-dev: github.com/google/pprof/proto/profile.proto) from symbolized
// stacks, and writes it gzip-compressed as `go tool pprof` and Go's /debug/pprof endpoints serve it.
// Also writes the folded-stack text of flamegraph.pl and speedscope.
//
// Thread-safety: a builder is used by one thread; the finished Profile is a value.
#pragma once

#include <google/protobuf/arena.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "pprof/profile.pb.h"

namespace tpe {

// One frame of a stack, as the symbolizer left it.
struct ProfileFrame {
  ProfileFrame() = default;
  ProfileFrame(uint64_t address, uint64_t mapping_id, std::string function = "", uint64_t location_id = 0)
      : address(address), mapping_id(mapping_id), function(std::move(function)), location_id(location_id) {}
  uint64_t address = 0;      // instruction address: in the process (user) or kernel virtual; 0 for a
                             // frame that only names something (a lost stack's reason)
  uint64_t mapping_id = 0;   // PprofBuilder::AddMapping's id; 0 when no mapping holds it
  std::string function;      // symbol name; "" when unsymbolized (the address and mapping remain)
  uint64_t location_id = 0;  // nonzero: PprofBuilder::FindLocation's id for (mapping_id, address),
                             // which this frame is (`function` is then unused)
  std::string file;          // `function`'s source file; "" when unknown
  int64_t line = 0;          // the source line in `function`; 0 when unknown
  // Functions inlined at `address`, innermost first, each with its own line (the innermost's at
  // the address, the others' at the call they inlined): pprof Lines before `function`'s.
  struct Inlined {
    std::string function, file;
    int64_t line = 0;
  };
  std::vector<Inlined> inlined;
};

// A mapping of an executable file (or the kernel) in the address space the frames come from.
// The symbolizer's are normalized: start 0 and file_offset 0, so a frame's address is its file
// offset (a user file) or its offset in the kernel image or module.
struct ProfileMapping {
  uint64_t start = 0;        // first address, inclusive
  uint64_t limit = 0;        // end address, exclusive
  uint64_t file_offset = 0;  // offset in `file` that `start` maps, bytes
  std::string file;          // path as the process saw it, or "[kernel.kallsyms]", "[xfs.ko]", "[unknown]"
  std::string build_id;      // GNU build id as lowercase hex; "" when unknown
  uint64_t key = 0;          // tells apart mappings otherwise equal (two files of one path); not written
};

class PprofBuilder {
 public:
  // `value_type`/`value_unit`: the one sample value, e.g. ("samples", "count") or ("bytes",
  // "bytes"). The profile's period_type is the same type and unit, its period 1: what one sample
  // stands for (Parca weighs samples by it).
  PprofBuilder(const std::string& value_type, const std::string& value_unit);

  // Adds a mapping and returns its id (1, 2, ...); an identical mapping returns the earlier id.
  // Every mapping is marked has_functions: its symbols were looked up here, whatever was found
  // (so `go tool pprof` does not ask the server's /debug/pprof/symbol for them).
  uint64_t AddMapping(const ProfileMapping& mapping);

  // The Location already made for a frame at (`mapping_id`, `address` != 0), and whether a
  // function names it; nullopt when none is. A symbolizer asks first and names only new frames
  // (most frames of a profile's stacks are shared).
  struct KnownLocation {
    uint64_t id = 0;
    bool named = false;
  };
  std::optional<KnownLocation> FindLocation(uint64_t mapping_id, uint64_t address) const;

  // Adds a sample: `leaf_first` frames (the innermost first, as pprof orders location_id),
  // string labels (key, value), and its value. Frames with the same (mapping, address) share one
  // Location; functions with the same name and file share one Function. A frame with inlined
  // functions is one Location with one Line per function, the innermost first (profile.proto:
  // "line[0] is the innermost inlined function; the last line is the caller into which the
  // preceding entries were inlined").
  void AddSample(std::span<const ProfileFrame> leaf_first, std::span<const std::pair<std::string, std::string>> labels,
                 int64_t value);
  // The same with the frames' Locations made before (AddLocation): a render names each distinct
  // frame once and adds its many stacks as ids, without copying a frame's names per stack.
  void AddSample(std::span<const uint64_t> leaf_first_location_ids,
                 std::span<const std::pair<std::string, std::string>> labels, int64_t value);
  // The Location of `frame` (made on first sight, as AddSample makes it): its id (1, 2, ...).
  uint64_t AddLocation(const ProfileFrame& frame) { return LocationOf(frame); }

  // When the samples were taken: start (CLOCK_REALTIME, ns since the epoch) and duration (ns).
  void SetTime(int64_t time_ns, int64_t duration_ns);

  const perftools::profiles::Profile& profile() const { return *profile_; }
  // A number no other builder of this process has (ids handed out by one builder mean nothing to
  // another, even one made later at the same address).
  uint64_t instance() const { return instance_; }

  // The profile serialized and gzip-compressed (RFC 1952), as pprof reads it. Internal on a
  // compression failure.
  StatusOr<std::string> Gzipped() const;

 private:
  int64_t Str(const std::string& s);
  uint64_t LocationOf(const ProfileFrame& frame);
  void AddValueAndLabels(perftools::profiles::Sample* sample,
                         std::span<const std::pair<std::string, std::string>> labels, int64_t value);

  const uint64_t instance_;
  // The profile's messages live in an arena (google/protobuf/arena.h): a render builds tens of
  // thousands of small messages and frees them at once, without a malloc and a free for each.
  std::unique_ptr<google::protobuf::Arena> arena_;
  perftools::profiles::Profile* profile_;  // in *arena_
  struct PairHash {
    size_t operator()(const std::pair<uint64_t, uint64_t>& p) const {
      return std::hash<uint64_t>()(p.first * 0x9e3779b97f4a7c15ULL ^ p.second);
    }
  };
  std::unordered_map<std::string, int64_t> strings_;
  // (mapping id, address != 0) -> location
  std::unordered_map<std::pair<uint64_t, uint64_t>, KnownLocation, PairHash> locations_;
  // (mapping id, name) of an address-0 frame (a lost stack's reason) -> location id
  std::map<std::pair<uint64_t, std::string>, uint64_t> named_frames_;
  uint64_t FunctionId(const std::string& name, const std::string& file);
  std::map<std::pair<std::string, std::string>, uint64_t> functions_;  // (name, file) -> id
  std::map<std::tuple<uint64_t, uint64_t, uint64_t, std::string, std::string, uint64_t>, uint64_t> mappings_;
};

// What a Location's code is, from its Mapping's file (as the Symbolizer names them):
// "[kernel.kallsyms]" and modules ("[xfs.ko]") kernel; a path or "[vdso]"/"[vsyscall]" user;
// other anonymous executable memory ("[jit pid N]", "", "[anon:...]", "//anon") JIT code;
// "[unknown]", or no mapping (a lost stack's frame), unknown.
enum class FrameKind { kUser, kKernel, kJit, kUnknown };

// A Location as a reader shows it: its function's name; unsymbolized, "<file>+0x<offset>" when
// its mapping is known, else "0x<address>".
struct LocationName {
  std::string name;  // the function holding the code (the Location's last Line)
  FrameKind kind = FrameKind::kUnknown;
  // Functions inlined there (the Location's other Lines), outermost first: drawn above `name`,
  // each above the one it was inlined into.
  std::vector<std::string> inlined;
};

// Every Location of `profile` by id.
std::map<uint64_t, LocationName> NameLocations(const perftools::profiles::Profile& profile);

// Folded stacks ("root;caller;leaf <value>\n" per distinct stack, sorted) of a profile's first
// value, as flamegraph.pl and speedscope read them; inlined functions are frames of their own. An unsymbolized frame is
// written as
// "<file>+0x<offset>" when its mapping is known, else "0x<address>"; ';' and spaces in names are
// replaced by '_' so the format stays parseable.
std::string FoldedStacks(const perftools::profiles::Profile& profile);

}  // namespace tpe

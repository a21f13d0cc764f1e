// Kernel tier: names for a stripped binary. tests/triggers' no_frame_pointers_g (the
// chain main -> tpe_nfp_a -> b -> c -> leaf built -O2 -fomit-frame-pointer -g, with
// tpe_nfp_inlined always inlined into tpe_nfp_leaf), stripped and its debug info split off
// (objcopy --only-keep-debug), makes N getppid() calls; a tracepoint profile (raw_syscalls:
// sys_enter, id == getppid) of its pid, unwound from .eh_frame, names every function of the chain
// and shows tpe_nfp_inlined as an inlined frame above tpe_nfp_leaf (one pprof Location, two
// Lines) — once with the debug file in /usr/lib/debug/.build-id/ of the process's own mount
// namespace (unshare -m, a tmpfs there: a container's files, looked up through /proc/PID/root),
// once served by a local debuginfod (elfutils' `debuginfod -F`, on 127.0.0.1), which
// `go tool pprof -traces` reads too. Servers that hang or answer garbage: the render returns,
// the failure is counted, nothing is misnamed.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "daemon/daemon.h"
#include "daemon/profile_pages.h"
#include "kernel/gunzip.h"
#include "kernel/kernel_util.h"
#include "pprof/profile.pb.h"
#include "testing/test_util.h"

namespace tpe {
namespace {

namespace fs = std::filesystem;

const std::string kDir = TPE_DEBUG_SPLIT_DIR;
const std::string kStripped = kDir + "/no_frame_pointers_g.stripped";
const std::string kDebug = kDir + "/no_frame_pointers_g.debug";
constexpr int kCalls = 300;
const char kChain[] = "main;tpe_nfp_a;tpe_nfp_b;tpe_nfp_c;tpe_nfp_leaf;tpe_nfp_inlined";

// A temporary directory, removed after the test.
struct TempDir {
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "/tpe_debuginfo.XXXXXX";
    EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
    path = tmpl;
  }
  ~TempDir() { fs::remove_all(path); }
  std::string path;
};

std::string BuildId() {
  auto elf = elf::ElfFile::Open(kStripped);
  EXPECT_TRUE(elf.ok()) << elf.status().ToString();
  return elf.ok() ? elf->build_id() : "";
}

// The stripped trigger, run by `sh -c SCRIPT` (which ends in `exec` of it, so its pid is the
// shell's): once it says "ready", it waits for a line on stdin before its calls, then prints "done" and holds until
// stdin closes (the render needs it alive: its root is where its debug file is).
class StrippedTrigger {
 public:
  explicit StrippedTrigger(const std::vector<std::string>& argv) {
    int in[2], out[2];
    EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    to_ = in[1];
    from_ = ::fdopen(out[0], "r");
    // The shell's own start (dash calls getppid) is over before the profile begins.
    char line[256];
    EXPECT_TRUE(std::fgets(line, sizeof(line), from_) != nullptr && std::string(line).starts_with("ready"));
  }
  ~StrippedTrigger() { Exit(); }
  pid_t pid() const { return pid_; }
  void Go() { EXPECT_EQ(::write(to_, "go\n", 3), 3); }
  // Waits for its "done" line; false when it died first.
  bool Done() {
    char line[256];
    return std::fgets(line, sizeof(line), from_) != nullptr && std::string(line).starts_with("done");
  }
  void Exit() {
    if (to_ >= 0) ::close(to_);
    to_ = -1;
    if (from_ != nullptr) std::fclose(from_);
    from_ = nullptr;
    if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int to_ = -1;
  FILE* from_ = nullptr;
};

// The stripped binary alone in a directory of its own (beside its build output, its
// .gnu_debuglink would find the debug file).
struct LoneBinary {
  LoneBinary() {
    path = dir.path + "/no_frame_pointers_g";
    fs::copy_file(kStripped, path);
    fs::permissions(path, fs::perms::owner_all);
  }
  TempDir dir;
  std::string path;
};

std::string Script(const LoneBinary& bin, const std::string& before) {
  return before + "echo ready && read go && exec " + bin.path + " getppid " + std::to_string(kCalls) +
         " tpe_nfp_g hold";
}

std::string Config(pid_t pid) {
  return R"({"settings": {"ring_buffer_pages": 1024, "profile_stack_bytes": 2048},
             "profiles": [{"name": "getppid_stacks", "event": "raw_syscalls:sys_enter", "stack": "user",
                           "filter": "common_pid == )" +
         std::to_string(pid) + " && id == " + std::to_string(SYS_getppid) + R"("}]})";
}

// Samples by their folded user path from main to tpe_nfp_inlined ("(other)" for the rest).
std::map<std::string, int64_t> Chains(const std::string& folded) {
  std::map<std::string, int64_t> out;
  for (size_t at = 0, nl; (nl = folded.find('\n', at)) != std::string::npos; at = nl + 1) {
    const std::string line = folded.substr(at, nl - at);
    const int64_t v = std::stoll(line.substr(line.rfind(' ') + 1));
    size_t m = line.find(";main;");
    m = line.starts_with("main;") ? 0 : (m == std::string::npos ? m : m + 1);
    const size_t end = line.find("tpe_nfp_inlined");
    out[m == std::string::npos || end == std::string::npos ? "(other) " + line : line.substr(m, end + 15 - m)] += v;
  }
  return out;
}

// The one Location of `p` at tpe_nfp_inlined: its Lines' function names, innermost first.
std::vector<std::string> InlinedLocation(const perftools::profiles::Profile& p) {
  for (const auto& loc : p.location()) {
    std::vector<std::string> names;
    for (const auto& l : loc.line())
      names.push_back(p.string_table(p.function(static_cast<int>(l.function_id() - 1)).name()));
    if (!names.empty() && names[0] == "tpe_nfp_inlined") return names;
  }
  return {};
}

// Runs the trigger under `argv`, profiles its calls, renders until `named` holds (at most
// `renders` times: a debuginfod fetch finishes between renders). Returns folded stacks and pprof.
struct Rendered {
  std::string folded, pprof;
  std::vector<MetricSnapshot> page;
};
Rendered Profile(const std::vector<std::string>& argv, const std::function<void(Pipeline&)>& setup, int renders) {
  Rendered r;
  StrippedTrigger t(argv);
  EXPECT_GT(t.pid(), 0);
  testing::RunPipelineWith(Config(t.pid()), [&](Pipeline& pipeline) {
    setup(pipeline);
    t.Go();
    EXPECT_TRUE(t.Done()) << "the trigger ran";
    EXPECT_TRUE(testing::WaitFor(pipeline, [](const std::vector<MetricSnapshot>& s) {
      return testing::Value(s, "tracepoint_exporter_profile_samples_total", {{"profile", "getppid_stacks"}}) >= kCalls;
    }));
    for (int i = 0; i < renders; ++i) {
      r.folded = RenderProfile(pipeline, "getppid_stacks", "folded").body;
      if (r.folded.find("tpe_nfp_inlined") != std::string::npos) break;
    }
    r.pprof = RenderProfile(pipeline, "getppid_stacks", "").body;
    r.page = pipeline.Snapshot();
  });
  t.Exit();
  return r;
}

double Debuginfo(const std::vector<MetricSnapshot>& page, const char* source, const char* result) {
  return testing::Value(page, "tracepoint_exporter_profile_debuginfo_total", {{"source", source}, {"result", result}});
}

void ExpectWholeChainWithInlinedFrame(const Rendered& r) {
  EXPECT_EQ(Chains(r.folded), (std::map<std::string, int64_t>{{kChain, kCalls}})) << r.folded;
  perftools::profiles::Profile p;
  ASSERT_TRUE(p.ParseFromString(testing::Gunzip(r.pprof)));
  EXPECT_EQ(InlinedLocation(p), (std::vector<std::string>{"tpe_nfp_inlined", "tpe_nfp_leaf"}));
}

TEST(ProfileDebuginfoTest, BuildIdDirectoryInTheProcessMountNamespace) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  const std::string id = BuildId();
  ASSERT_EQ(id.size(), 40u);
  // The host has no such file: only the process's own root holds it.
  const std::string rel = ".build-id/" + id.substr(0, 2) + "/" + id.substr(2) + ".debug";
  ASSERT_FALSE(fs::exists("/usr/lib/debug/" + rel));
  LoneBinary bin;
  const std::string script = Script(
      bin, "mkdir -p /usr/lib/debug && mount -t tmpfs tpe-debug /usr/lib/debug && mkdir -p /usr/lib/debug/.build-id/" +
               id.substr(0, 2) + " && cp " + kDebug + " /usr/lib/debug/" + rel + " && ");
  Rendered r = Profile(
      {"unshare", "-m", "--propagation", "private", "sh", "-c", script}, [](Pipeline&) {}, 1);
  ExpectWholeChainWithInlinedFrame(r);
  // Ours, and libc's where the host has libc6-dbg (renders after the first find them cached:
  // profile_unittest's RenderTest.StrippedBinaryNamedFromItsDebugFileWithInlinedFrames).
  EXPECT_GE(Debuginfo(r.page, "build_id_dir", "found"), 1);
  EXPECT_EQ(Debuginfo(r.page, "debuginfod", "pending"), 0);
}

// A free TCP port on 127.0.0.1 (bound, then let go for the server to take).
int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Sets the pipeline's debuginfod client as the daemon would from `settings.debuginfod_urls`.
void UseDebuginfod(Pipeline& pipeline, const std::string& urls, const std::string& cache) {
  auto cfg = ParseConfig(
      R"({"settings": {"debuginfod_urls": ")" + urls + R"("}, "profiles": [{"name": "p", "event": "s:e"}]})", "t.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  ::setenv("DEBUGINFOD_CACHE_PATH", cache.c_str(), 1);
  symbols::DebuginfodClient::Options o = DebuginfodOptions(cfg->settings);
  EXPECT_EQ(o.cache_dir, cache);
  o.timeout_seconds = 2;
  o.max_seconds = 3;
  pipeline.renderer().SetDebuginfod(o);
}

TEST(ProfileDebuginfoTest, ServedByALocalDebuginfodAndReadByGoToolPprof) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  if (::access("/usr/bin/debuginfod", X_OK) != 0) {
    if (testing::KernelRequired())
      FAIL() << "TPE_REQUIRE_KERNEL=1: /usr/bin/debuginfod missing (apt install debuginfod)";
    GTEST_SKIP() << "/usr/bin/debuginfod missing (Debian package debuginfod)";
  }
  const std::string id = BuildId();
  TempDir served, cache;
  fs::copy_file(kDebug, served.path + "/no_frame_pointers_g.debug");
  const int port = FreePort();
  const pid_t server = ::fork();
  if (server == 0) {
    const std::string p = std::to_string(port), db = served.path + "/db.sqlite";
    const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    ::dup2(null, 2);
    ::execl("/usr/bin/debuginfod", "debuginfod", "-F", "-d", db.c_str(), "-p", p.c_str(), "-t", "0", "-g", "0",
            served.path.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ASSERT_GT(server, 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  // Ready once it has scanned the file (debuginfod scans in the background).
  bool ready = false;
  for (int i = 0; i < 300 && !ready; ++i) {
    ready = std::system(("curl -sf -o /dev/null " + url + "/buildid/" + id + "/debuginfo").c_str()) == 0;
    if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(ready) << "debuginfod on " << url << " never served " << id;
  LoneBinary bin;
  Rendered r = Profile(
      {"sh", "-c", Script(bin, "")}, [&](Pipeline& p) { UseDebuginfod(p, url, cache.path + "/cache"); }, 10);
  ::kill(server, SIGTERM);
  ::waitpid(server, nullptr, 0);
  ExpectWholeChainWithInlinedFrame(r);
  EXPECT_GE(Debuginfo(r.page, "debuginfod", "found"), 1);
  // The local sources are looked at again while the fetch is pending (at most once per render).
  EXPECT_GE(Debuginfo(r.page, "build_id_dir", "missing"), 1);
  // go tool pprof reads the inlined frame from the Location's Lines.
  if (::access("/usr/bin/go", X_OK) == 0 || ::access("/usr/lib/go/bin/go", X_OK) == 0) {
    const std::string file = cache.path + "/p.pb.gz";
    std::ofstream(file, std::ios::binary) << r.pprof;
    const std::string out = cache.path + "/traces.txt";
    ASSERT_EQ(std::system(("HOME=" + cache.path + " go tool pprof -traces " + file + " > " + out + " 2>&1").c_str()),
              0);
    std::ifstream in(out);
    const std::string traces((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // Innermost first: the inlined function, then its caller marked "(inline)" by pprof.
    const size_t inl = traces.find("tpe_nfp_inlined");
    ASSERT_NE(inl, std::string::npos) << traces;
    EXPECT_NE(traces.find("tpe_nfp_leaf", inl), std::string::npos) << traces;
    EXPECT_NE(traces.find("tpe_nfp_c", inl), std::string::npos) << traces;
  }
}

// A server that accepts and never answers, or answers garbage: the render returns, the failure
// is counted, and the binary's frames stay offsets (no wrong name).
TEST(ProfileDebuginfoTest, AHangingOrGarbageServerNamesNothingAndIsCounted) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  for (const bool hang : {true, false}) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    ASSERT_EQ(::listen(fd, 8), 0);
    socklen_t len = sizeof(a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    std::atomic<bool> stop{false};
    std::thread server([&] {
      std::vector<int> held;
      while (!stop) {
        const int c = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) break;
        if (hang) {
          held.push_back(c);
          continue;
        }
        char buf[2048];
        (void)::read(c, buf, sizeof(buf));
        const std::string garbage =
            "HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\n\x7f"
            "ELFjunk!";
        (void)::write(c, garbage.data(), garbage.size());
        ::close(c);
      }
      for (int c : held) ::close(c);
    });
    TempDir cache;
    const std::string url = "http://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    LoneBinary bin;
    Rendered r = Profile(
        {"sh", "-c", Script(bin, "")}, [&](Pipeline& p) { UseDebuginfod(p, url, cache.path + "/cache"); },
        hang ? 1 : 2);
    stop = true;
    ::shutdown(fd, SHUT_RDWR);
    server.join();
    ::close(fd);
    EXPECT_EQ(r.folded.find("tpe_nfp"), std::string::npos) << (hang ? "hang: " : "garbage: ") << r.folded;
    EXPECT_NE(r.folded.find("/no_frame_pointers_g+0x"), std::string::npos) << r.folded;
    if (hang) {
      EXPECT_GE(Debuginfo(r.page, "debuginfod", "pending") + Debuginfo(r.page, "debuginfod", "failed"), 1);
    } else {
      EXPECT_EQ(Debuginfo(r.page, "debuginfod", "invalid"), 1) << "the answer is no ELF file: refused once";
    }
  }
}

}  // namespace
}  // namespace tpe

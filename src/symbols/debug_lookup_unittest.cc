#include "symbols/debug_lookup.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace tpe::symbols {
namespace {

namespace fs = std::filesystem;

const std::string kDir = TPE_DEBUG_SPLIT_DIR;  // tests/triggers/CMakeLists.txt made these
const std::string kStripped = kDir + "/no_frame_pointers_g.stripped";
const std::string kDebug = kDir + "/no_frame_pointers_g.debug";
const std::string kBadCrc = kDir + "/no_frame_pointers_g.badcrc.debug";
const std::string kMini = kDir + "/no_frame_pointers_g.mini";
const std::string kOther = kDir + "/getppid_loop.other.debug";

// A directory made for one test, removed after it.
class TempRoot {
 public:
  TempRoot() {
    std::string tmpl = ::testing::TempDir() + "/tpe_debug_lookup.XXXXXX";
    EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
    path_ = tmpl;
  }
  ~TempRoot() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }
  // Copies `from` to `relative` below the root, making the directories.
  void Put(const std::string& from, const std::string& relative) const {
    const fs::path to = fs::path(path_) / relative.substr(relative[0] == '/' ? 1 : 0);
    fs::create_directories(to.parent_path());
    fs::copy_file(from, to, fs::copy_options::overwrite_existing);
  }

 private:
  std::string path_;
};

struct Binary {
  explicit Binary(const std::string& path) {
    fd = ScopedFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    auto opened = elf::ElfFile::OpenFd(fd.get(), path);
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    if (opened.ok()) elf = std::make_shared<elf::ElfFile>(std::move(opened).value());
  }
  // As a process at `path` names it (the debuglink directories come from it).
  BinaryRef Ref(const std::string& path, const std::string& process_root = "") const {
    return BinaryRef{elf.get(), fd.get(), path, process_root};
  }
  ScopedFd fd;
  std::shared_ptr<elf::ElfFile> elf;
};

std::string BuildIdPath(const Binary& b) {
  const std::string& id = b.elf->build_id();
  return "/usr/lib/debug/.build-id/" + id.substr(0, 2) + "/" + id.substr(2) + ".debug";
}

DebugLookupOptions In(const TempRoot& root) {
  DebugLookupOptions o;
  o.host_root = root.path();
  return o;
}

TEST(DebugLookupTest, TheStrippedBinaryHasNoSymtabButALinkAndABuildId) {
  Binary b(kStripped);
  ASSERT_NE(b.elf, nullptr);
  EXPECT_FALSE(b.elf->has_symtab());
  EXPECT_FALSE(b.elf->has_debug_info());
  EXPECT_EQ(b.elf->build_id().size(), 40u);
  EXPECT_EQ(b.elf->debuglink().name, "no_frame_pointers_g.debug");
  auto crc = FileCrc32(ScopedFd(::open(kDebug.c_str(), O_RDONLY | O_CLOEXEC)).get(), 1 << 30);
  ASSERT_TRUE(crc.ok());
  EXPECT_EQ(b.elf->debuglink().crc, *crc);
  EXPECT_FALSE(b.elf->FindFunction("tpe_nfp_leaf").ok()) << "stripped of it";
}

TEST(DebugLookupTest, BuildIdDirectoryUnderTheRoot) {
  Binary b(kStripped);
  TempRoot root;
  root.Put(kDebug, BuildIdPath(b));
  DebugInfoCounts counts;
  DebugLookup found = FindDebugFile(b.Ref("/opt/app/no_frame_pointers_g"), In(root), nullptr, &counts);
  ASSERT_TRUE(found.file.has_value());
  EXPECT_EQ(found.file->source, DebugSource::kBuildIdDir);
  EXPECT_EQ(found.file->display, root.path() + BuildIdPath(b));
  EXPECT_TRUE(found.file->elf->FindFunction("tpe_nfp_leaf").ok());
  EXPECT_NE(found.file->dwarf, nullptr);
  EXPECT_EQ(counts.Get(DebugSource::kBuildIdDir, DebugResult::kFound), 1u);
  EXPECT_EQ(counts.Get(DebugSource::kDebugLink, DebugResult::kMissing), 0u) << "not looked for";
}

TEST(DebugLookupTest, BuildIdDirectoryInTheProcessRootBeforeTheHosts) {
  Binary b(kStripped);
  TempRoot host, container;
  container.Put(kDebug, BuildIdPath(b));
  DebugInfoCounts counts;
  DebugLookup found = FindDebugFile(b.Ref("/app/x", container.path()), In(host), nullptr, &counts);
  ASSERT_TRUE(found.file.has_value());
  EXPECT_EQ(found.file->display, container.path() + BuildIdPath(b));
}

TEST(DebugLookupTest, ADebugFileOfAnotherBuildIdIsRefused) {
  Binary b(kStripped);
  TempRoot root;
  root.Put(kOther, BuildIdPath(b));
  DebugInfoCounts counts;
  DebugLookup found = FindDebugFile(b.Ref("/opt/app/no_frame_pointers_g"), In(root), nullptr, &counts);
  EXPECT_FALSE(found.file.has_value());
  EXPECT_EQ(counts.Get(DebugSource::kBuildIdDir, DebugResult::kBuildIdMismatch), 1u);
  EXPECT_EQ(counts.Get(DebugSource::kBuildIdDir, DebugResult::kFound), 0u);
  EXPECT_EQ(counts.Get(DebugSource::kDebugLink, DebugResult::kMissing), 1u);
}

TEST(DebugLookupTest, DebugLinkBesideInDotDebugAndUnderTheDebugDirectory) {
  Binary b(kStripped);
  for (const char* where : {"/opt/app/", "/opt/app/.debug/", "/usr/lib/debug/opt/app/"}) {
    TempRoot root;
    root.Put(kDebug, std::string(where) + "no_frame_pointers_g.debug");
    DebugInfoCounts counts;
    DebugLookup found = FindDebugFile(b.Ref("/opt/app/no_frame_pointers_g"), In(root), nullptr, &counts);
    ASSERT_TRUE(found.file.has_value()) << where;
    EXPECT_EQ(found.file->source, DebugSource::kDebugLink);
    EXPECT_EQ(found.file->display, root.path() + where + "no_frame_pointers_g.debug");
    EXPECT_NE(found.file->dwarf, nullptr);
    EXPECT_EQ(counts.Get(DebugSource::kBuildIdDir, DebugResult::kMissing), 1u);
    EXPECT_EQ(counts.Get(DebugSource::kDebugLink, DebugResult::kFound), 1u);
  }
}

TEST(DebugLookupTest, DebugLinkWithAnotherCrcIsRefused) {
  Binary b(kStripped);
  TempRoot root;
  root.Put(kBadCrc, "/opt/app/no_frame_pointers_g.debug");
  DebugInfoCounts counts;
  DebugLookup found = FindDebugFile(b.Ref("/opt/app/no_frame_pointers_g"), In(root), nullptr, &counts);
  EXPECT_FALSE(found.file.has_value());
  EXPECT_EQ(counts.Get(DebugSource::kDebugLink, DebugResult::kCrcMismatch), 1u);
  EXPECT_EQ(counts.Get(DebugSource::kDebugLink, DebugResult::kFound), 0u);
}

TEST(DebugLookupTest, DebugLinkToAFifoIsRefusedNotOpened) {
  Binary b(kStripped);
  TempRoot root;
  fs::create_directories(root.path() + "/opt/app");
  ASSERT_EQ(::mkfifo((root.path() + "/opt/app/no_frame_pointers_g.debug").c_str(), 0600), 0);
  DebugInfoCounts counts;
  DebugLookup found = FindDebugFile(b.Ref("/opt/app/no_frame_pointers_g"), In(root), nullptr, &counts);
  EXPECT_FALSE(found.file.has_value());
  EXPECT_EQ(counts.Get(DebugSource::kDebugLink, DebugResult::kRefused), 1u);
}

TEST(DebugLookupTest, MiniDebugInfoNamesFunctions) {
  Binary b(kMini);
  ASSERT_NE(b.elf, nullptr);
  EXPECT_GT(b.elf->debugdata().size, 0u);
  EXPECT_TRUE(b.elf->debuglink().name.empty());
  TempRoot root;
  DebugInfoCounts counts;
  DebugLookup found = FindDebugFile(b.Ref("/opt/app/mini"), In(root), nullptr, &counts);
  ASSERT_TRUE(found.file.has_value());
  EXPECT_EQ(found.file->source, DebugSource::kDebugData);
  EXPECT_TRUE(found.file->elf->FindFunction("tpe_nfp_leaf").ok());
  EXPECT_EQ(found.file->dwarf, nullptr);
  EXPECT_EQ(counts.Get(DebugSource::kBuildIdDir, DebugResult::kMissing), 1u);
  EXPECT_EQ(counts.Get(DebugSource::kDebugData, DebugResult::kFound), 1u);
}

TEST(DebugLookupTest, CorruptOrHugeXzIsAnError) {
  EXPECT_FALSE(DecompressXzToMemfd("not xz at all", 1 << 20, "t").ok());
  // 1 MiB of zeros compressed: refused under a 4 KiB bound.
  std::ifstream in(kMini, std::ios::binary);
  std::string zeros(1 << 20, '\0');
  const std::string xz = kDir + "/zeros";
  std::ofstream(xz, std::ios::binary) << zeros;
  ASSERT_EQ(std::system(("xz -f -k " + xz).c_str()), 0);
  std::ifstream z(xz + ".xz", std::ios::binary);
  std::stringstream ss;
  ss << z.rdbuf();
  auto big = DecompressXzToMemfd(ss.str(), 4096, "t");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("more than 4096 bytes"), std::string::npos) << big.status().message();
  EXPECT_TRUE(DecompressXzToMemfd(ss.str(), 2 << 20, "t").ok());
}

// The line in no_frame_pointers.cc that holds `text`.
int64_t SourceLine(const std::string& text) {
  std::ifstream in(TPE_NFP_SOURCE);
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find(text) != std::string::npos) return n;
  }
  return -1;
}

TEST(DwarfInfoTest, InlinedFunctionAboveItsCallerWithLines) {
  Binary b(kStripped);
  ScopedFd fd(::open(kDebug.c_str(), O_RDONLY | O_CLOEXEC));
  auto dwarf = DwarfInfo::Open(fd.get(), kDebug);
  ASSERT_TRUE(dwarf.ok()) << dwarf.status().ToString();
  auto debug_elf = elf::ElfFile::OpenDebugFd(fd.get(), kDebug, b.elf->segments());
  ASSERT_TRUE(debug_elf.ok());
  auto leaf = debug_elf->FindFunction("tpe_nfp_leaf");
  ASSERT_TRUE(leaf.ok());
  ASSERT_GT(leaf->size, 0u);
  size_t inlined = 0, outer_only = 0;
  std::vector<DwarfInfo::Line> seen;
  for (uint64_t a = leaf->address; a < leaf->address + leaf->size; ++a) {
    auto lines = (*dwarf)->Lookup(a);
    ASSERT_FALSE(lines.empty()) << std::hex << a;
    EXPECT_EQ(lines.back().function, "tpe_nfp_leaf");
    if (lines.size() == 2) {
      ++inlined;
      EXPECT_EQ(lines[0].function, "tpe_nfp_inlined");
      seen = lines;
    } else {
      ++outer_only;
    }
  }
  EXPECT_GT(inlined, 0u);
  ASSERT_EQ(seen.size(), 2u);
  // The caller's line is the call site.
  EXPECT_EQ(seen[1].line, SourceLine("const long r = tpe_nfp_inlined(mode, arg, &acc);"));
  EXPECT_TRUE(seen[1].file.ends_with("no_frame_pointers.cc")) << seen[1].file;
  const int64_t first = SourceLine("long tpe_nfp_inlined(int mode"),
                last = SourceLine("__attribute__((noinline)) long tpe_nfp_leaf");
  EXPECT_GT(seen[0].line, first);
  EXPECT_LT(seen[0].line, last);
  // An address no unit covers: nothing.
  EXPECT_TRUE((*dwarf)->Lookup(1).empty());
}

TEST(DwarfInfoTest, NoDwarfIsNotFoundAndGarbageIsNoCrash) {
  ScopedFd fd(::open(kStripped.c_str(), O_RDONLY | O_CLOEXEC));
  auto none = DwarfInfo::Open(fd.get(), kStripped);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  TempRoot root;
  const std::string junk = root.path() + "/junk";
  std::ofstream(junk) << "definitely not ELF";
  ScopedFd jfd(::open(junk.c_str(), O_RDONLY | O_CLOEXEC));
  EXPECT_FALSE(DwarfInfo::Open(jfd.get(), junk).ok());
}

// A server on 127.0.0.1 that accepts and then answers `answer` to every request ("" never answers).
class FakeServer {
 public:
  explicit FakeServer(std::string answer) : answer_(std::move(answer)) {
    fd_ = ScopedFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(::listen(fd_.get(), 16), 0);
    socklen_t len = sizeof(a);
    ::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      while (true) {
        int c = ::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0 || stop_) {
          if (c >= 0) ::close(c);
          return;
        }
        ++accepted_;
        if (answer_.empty()) {
          held_.push_back(ScopedFd(c));  // never answered
          continue;
        }
        char buf[4096];
        (void)::read(c, buf, sizeof(buf));
        (void)::write(c, answer_.data(), answer_.size());
        ::close(c);
      }
    });
  }
  ~FakeServer() {
    stop_ = true;
    ::shutdown(fd_.get(), SHUT_RDWR);
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int accepted() const { return accepted_; }

 private:
  std::string answer_;
  ScopedFd fd_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::vector<ScopedFd> held_;
};

DebuginfodClient::Options ClientOptions(const std::string& url, const TempRoot& cache) {
  DebuginfodClient::Options o;
  o.urls = url;
  o.cache_dir = cache.path() + "/debuginfod";
  o.timeout_seconds = 1;
  o.max_seconds = 2;
  return o;
}

TEST(DebuginfodTest, AServerThatNeverAnswersFailsTheFetchAndNamesNothing) {
  FakeServer server("");
  TempRoot root, cache;
  Binary b(kStripped);
  DebugInfoCounts counts;
  DebuginfodClient client(ClientOptions(server.url(), cache));
  DebugLookup first = FindDebugFile(b.Ref("/opt/app/x"), In(root), &client, &counts);
  EXPECT_FALSE(first.file.has_value());
  EXPECT_TRUE(first.pending) << "never waits on the network";
  EXPECT_EQ(counts.Get(DebugSource::kDebuginfod, DebugResult::kPending), 1u);
  const std::string id = b.elf->build_id();
  // The fetch is cancelled past max_seconds, whatever the server does.
  client.WaitFor(std::span<const std::string>(&id, 1), std::chrono::steady_clock::now() + std::chrono::seconds(60));
  DebugLookup second = FindDebugFile(b.Ref("/opt/app/x"), In(root), &client, &counts);
  EXPECT_FALSE(second.file.has_value());
  EXPECT_FALSE(second.pending);
  EXPECT_EQ(counts.Get(DebugSource::kDebuginfod, DebugResult::kFailed), 1u) << client.Find(id).error;
  EXPECT_GE(server.accepted(), 1);
}

TEST(DebuginfodTest, DestroyingTheClientCancelsAHangingFetch) {
  FakeServer server("");
  TempRoot cache;
  Binary b(kStripped);
  auto o = ClientOptions(server.url(), cache);
  o.timeout_seconds = 3600;
  o.max_seconds = 3600;
  {
    DebuginfodClient client(o);
    EXPECT_EQ(client.Find(b.elf->build_id()).state, DebuginfodClient::State::kPending);
    while (server.accepted() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }  // returns: the progress callback cancels the fetch
  SUCCEED();
}

TEST(DebuginfodTest, AGarbageAnswerIsRefusedNotNamed) {
  FakeServer server("HTTP/1.1 200 OK\r\nContent-Length: 13\r\nConnection: close\r\n\r\nnot a debug!!");
  TempRoot root, cache;
  Binary b(kStripped);
  DebugInfoCounts counts;
  DebuginfodClient client(ClientOptions(server.url(), cache));
  const std::string id = b.elf->build_id();
  EXPECT_EQ(client.Find(id).state, DebuginfodClient::State::kPending);
  client.WaitFor(std::span<const std::string>(&id, 1), std::chrono::steady_clock::now() + std::chrono::seconds(60));
  ASSERT_EQ(client.Find(id).state, DebuginfodClient::State::kFound) << client.Find(id).error;
  DebugLookup found = FindDebugFile(b.Ref("/opt/app/x"), In(root), &client, &counts);
  EXPECT_FALSE(found.file.has_value());
  EXPECT_EQ(counts.Get(DebugSource::kDebuginfod, DebugResult::kInvalid), 1u);
  EXPECT_EQ(client.Find(id).state, DebuginfodClient::State::kFailed) << "not used again";
}

TEST(DebuginfodTest, AnotherBuildIdsFileIsRefused) {
  std::ifstream in(kOther, std::ios::binary);
  std::stringstream body;
  body << in.rdbuf();
  FakeServer server("HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.str().size()) +
                    "\r\nConnection: close\r\n\r\n" + body.str());
  TempRoot root, cache;
  Binary b(kStripped);
  DebugInfoCounts counts;
  DebuginfodClient client(ClientOptions(server.url(), cache));
  const std::string id = b.elf->build_id();
  client.Find(id);
  client.WaitFor(std::span<const std::string>(&id, 1), std::chrono::steady_clock::now() + std::chrono::seconds(60));
  DebugLookup found = FindDebugFile(b.Ref("/opt/app/x"), In(root), &client, &counts);
  EXPECT_FALSE(found.file.has_value());
  EXPECT_EQ(counts.Get(DebugSource::kDebuginfod, DebugResult::kBuildIdMismatch), 1u);
}

TEST(DebuginfodTest, OffWithoutUrls) {
  TempRoot cache;
  DebuginfodClient client(ClientOptions("", cache));
  EXPECT_FALSE(client.enabled());
  EXPECT_EQ(client.Find("abcd").state, DebuginfodClient::State::kMissing);
}

}  // namespace
}  // namespace tpe::symbols

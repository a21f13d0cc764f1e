// Captures real PERF_RECORD_SAMPLE records from the running kernel as test data for the
// byte-exact decode tests (src/decode/*_unittest.cc). Each record comes from a known action of
// this process, so its decoded fields are known:
//   syscalls:sys_enter_write   write(fd, buf, 4242) to /dev/null
//   net:net_dev_xmit           one 100-byte UDP datagram to 127.0.0.1 (len 142 on "lo")
//   sched:sched_switch         this task (comm "tpe_capture") sleeping in nanosleep (prev_state S)
// Usage (root): capture_records OUT_DIR   → OUT_DIR/<event>.hex (one record, hex, 32 bytes/line)
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <string>

#include "perf/perf_event.h"
#include "perf/ring_buffer.h"
#include "tracefs/tracefs.h"

namespace {

int Capture(const tpe::Tracefs& tracefs, const std::string& sys, const std::string& ev, const std::string& filter,
            const std::function<void()>& action, const std::string& out_path) {
  auto id = tracefs.ReadId({sys, ev});
  if (!id.ok()) return std::fprintf(stderr, "%s\n", id.status().message().c_str()), 1;
  tpe::TracepointEventOptions o;
  o.tracepoint_id = *id;
  o.sampled = true;
  auto fd = tpe::OpenPerfEvent(tpe::MakeTracepointAttr(o), 0);
  if (!fd.ok()) return std::fprintf(stderr, "%s\n", fd.status().message().c_str()), 1;
  if (auto st = tpe::SetFilter(fd->get(), filter); !st.ok())
    return std::fprintf(stderr, "%s\n", st.message().c_str()), 1;
  auto ring = tpe::RingBuffer::Map(fd->get(), 8);
  if (!ring.ok()) return 1;
  (void)tpe::EnableEvent(fd->get());
  action();
  (void)tpe::DisableEvent(fd->get());
  auto cur = ring->Cursor(ring->LoadHead());
  tpe::RawRecord rec;
  while (cur.Next(&rec) == tpe::RingCursor::Result::kRecord) {
    if (rec.type != PERF_RECORD_SAMPLE) continue;
    std::ofstream out(out_path);
    out << "# " << sys << ":" << ev << " PERF_RECORD_SAMPLE, sample_type IDENTIFIER|TID|TIME|RAW, " << rec.bytes.size()
        << " bytes\n";
    for (size_t i = 0; i < rec.bytes.size(); ++i) {
      char b[4];
      std::snprintf(b, sizeof(b), "%02x", rec.bytes[i]);
      out << b << ((i % 32 == 31 || i + 1 == rec.bytes.size()) ? "\n" : " ");
    }
    std::printf("wrote %s (%zu bytes)\n", out_path.c_str(), rec.bytes.size());
    return 0;
  }
  std::fprintf(stderr, "no sample captured for %s:%s\n", sys.c_str(), ev.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]), 2;
  std::string dir = argv[1];
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(0, &set);
  sched_setaffinity(0, sizeof(set), &set);
  prctl(PR_SET_NAME, "tpe_capture");
  auto tracefs = tpe::Tracefs::Discover("auto");
  if (!tracefs.ok()) return 1;
  std::string self = "common_pid == " + std::to_string(getpid());
  int rc = 0;
  rc |= Capture(
      *tracefs, "syscalls", "sys_enter_write", self,
      [] {
        static char buf[4242];
        int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
        (void)!write(fd, buf, sizeof(buf));
        close(fd);
      },
      dir + "/sys_enter_write.hex");
  rc |= Capture(
      *tracefs, "net", "net_dev_xmit", self,
      [] {
        int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(9);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        char payload[100] = {};
        sendto(s, payload, sizeof(payload), 0, reinterpret_cast<sockaddr*>(&a), sizeof(a));
        close(s);
      },
      dir + "/net_dev_xmit.hex");
  rc |= Capture(
      *tracefs, "sched", "sched_switch", "prev_pid == " + std::to_string(getpid()),
      [] {
        timespec ts{0, 2'000'000};
        nanosleep(&ts, nullptr);
      },
      dir + "/sched_switch.hex");
  return rc;
}

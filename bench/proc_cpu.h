// SPDX-License-Identifier: Apache-2.0
// The CPU a process (a real sluiced the bench started) has used, from its
// /proc files: what the benchmarks that measure sluiced's own cost read
// before and after each phase.
#ifndef SLUICE_BENCH_PROC_CPU_H_
#define SLUICE_BENCH_PROC_CPU_H_

#include <dirent.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace sluice::bench {

// The whole of a file ("" when it cannot be read).
inline std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// utime + stime of the whole process (all threads), in microseconds, or -1.
// The kernel counts them in clock ticks (1/CLK_TCK s, 10 ms here).
inline double CpuMicros(pid_t pid) {
  const std::string stat = Slurp(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return -1;
  std::vector<std::string> fields = absl::StrSplit(stat.substr(paren + 2), ' ');
  // After "pid (comm) ": state is field 3, utime 14, stime 15.
  uint64_t utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return -1;
  }
  return static_cast<double>(utime + stime) * 1e6 /
         static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Run time of the process's current threads in microseconds, summed from
// /proc/PID/task/*/schedstat (nanosecond precision, unlike the 10 ms ticks
// of utime/stime; a thread that exits takes its time with it, so this is
// for intervals in which the threads stay), or -1.
inline double SchedMicros(pid_t pid) {
  const std::string dir = absl::StrCat("/proc/", pid, "/task");
  DIR* tasks = opendir(dir.c_str());
  if (tasks == nullptr) return -1;
  double total_ns = 0;
  while (dirent* e = readdir(tasks)) {
    if (e->d_name[0] == '.') continue;
    std::istringstream in(
        Slurp(absl::StrCat(dir, "/", e->d_name, "/schedstat")));
    uint64_t ns = 0;
    if (in >> ns) total_ns += static_cast<double>(ns);
  }
  closedir(tasks);
  return total_ns / 1000.0;
}

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_PROC_CPU_H_

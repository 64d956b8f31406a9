// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TOOLS_COMMON_COMMAND_LINE_H_
#define SLUICE_TOOLS_COMMON_COMMAND_LINE_H_

// The CLI11 settings and usage-error reporting that sluicectl and
// sluice-call share, so both read their command lines the same way:
//   - "--flag value" and "--flag=value" both work, "--flag=" included;
//   - a repeated flag takes its last value;
//   - flags may come before or after the command and its arguments;
//   - a command refuses flags it does not take and arguments beyond its own;
//   - there is at most one command, so an argument spelled like a command
//     (a policy named "list") stays an argument.

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace sluice::tools {

// Applies the settings above; `help_text` is what --help prints verbatim.
// Call before adding flags and commands: they inherit the settings.
void ConfigureApp(CLI::App& app, std::string help_text);

// A command whose --help prints `help_text` verbatim.
CLI::App* AddCommand(CLI::App& app, const std::string& name,
                     std::string help_text);

// A flag whose value `parse` checks and stores; a non-OK status makes the
// command line a usage error with the status message.
CLI::Option* AddCheckedOption(
    CLI::App* app, const std::string& name,
    std::function<absl::Status(const std::string&)> parse);

// The flags only some commands take. They are added to the app (so they may
// come before the command); ParseCommandLine refuses one given to a command
// not listed for it.
class CommandFlags {
 public:
  void Add(const CLI::Option* flag, std::vector<const CLI::App*> commands) {
    flags_.emplace_back(flag, std::move(commands));
  }

  // "unknown flag --key for health", or "" when `command` takes every
  // command flag that was given.
  std::string Check(const CLI::App* command) const;

 private:
  std::vector<std::pair<const CLI::Option*, std::vector<const CLI::App*>>>
      flags_;
};

// What reading the command line came to.
struct CommandLine {
  enum class Outcome { kRun, kHelp, kUsageError };
  Outcome outcome = Outcome::kRun;
  // kHelp: the help to print. kUsageError: one line naming the argument,
  // e.g. `unknown command "x"`, `unexpected argument "y" for get`.
  std::string text;
};

// argv[1..argc) as CLI11's parse wants it (last first), with each "--flag="
// split into "--flag" and "". CLI11 2.1.2 reads "--flag=" as "--flag" and
// then takes the next argument as the value, even another flag; "--flag="
// has always meant an empty value (--key="$KEY" with KEY unset, --policies=
// for none). ParseCommandLine applies it; sluiced calls it itself.
std::vector<std::string> SplitEmptyValues(int argc, const char* const* argv);

CommandLine ParseCommandLine(CLI::App& app, const CommandFlags& flags, int argc,
                             const char* const* argv);

}  // namespace sluice::tools

#endif  // SLUICE_TOOLS_COMMON_COMMAND_LINE_H_

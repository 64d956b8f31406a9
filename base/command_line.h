// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_BASE_COMMAND_LINE_H_
#define SLUICE_BASE_COMMAND_LINE_H_

// How Sluice's programs read their command lines with CLI11. sluiced,
// sluicectl, sluice-call and sluice-bench report usage errors through
// ParseCommandLine, so one mistake reads the same in each ("--target needs a
// value", "unknown flag --x"). The tools (not sluiced, whose flags and help
// are its own) also take ConfigureApp's settings:
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

namespace sluice::base {

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

// Where the client TLS flags store their values.
struct ClientTlsFlagValues {
  std::string* ca_file = nullptr;
  std::string* cert_file = nullptr;
  std::string* key_file = nullptr;
  std::string* server_name = nullptr;
};

// --tls-ca, --tls-cert, --tls-key and --tls-server-name, which the
// environment variables ENV_PREFIX_TLS_CA, _TLS_CERT, _TLS_KEY and
// _TLS_SERVER_NAME set when the command line does not.
void AddClientTlsFlags(CLI::App& app, const std::string& env_prefix,
                       const ClientTlsFlagValues& values);

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
  // e.g. `unknown command "x"`, `unexpected argument "y" for get`,
  // `--target needs a value`, `unknown flag --x` (never the value of
  // --x=VALUE, which may be a secret).
  std::string text;
};

// Parses argv[1..argc) into `app`. "--flag=" is an empty value: CLI11 2.1.2
// reads it as "--flag" and then takes the next argument as the value, even
// another flag, while "--flag=" has always meant empty (--key="$KEY" with KEY
// unset, --policies= for none). An app without commands (sluiced,
// sluice-bench) calls a stray word an unexpected argument; one with commands
// calls it an unknown command. `flags` may be empty.
CommandLine ParseCommandLine(CLI::App& app, const CommandFlags& flags, int argc,
                             const char* const* argv);

}  // namespace sluice::base

#endif  // SLUICE_BASE_COMMAND_LINE_H_

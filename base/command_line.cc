// SPDX-License-Identifier: Apache-2.0
#include "base/command_line.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace sluice::base {
namespace {

std::shared_ptr<CLI::FormatterLambda> Verbatim(std::string text) {
  return std::make_shared<CLI::FormatterLambda>(
      [text = std::move(text)](const CLI::App*, std::string,
                               CLI::AppFormatMode) { return text; });
}

// The first argument nothing claimed, said the same way by every program.
std::string DescribeExtra(const CLI::App& app) {
  std::vector<std::string> extras = app.remaining(/*recurse=*/true);
  // CLI11 keeps a "--" in front of the arguments that followed it: what
  // follows is an argument even when spelled like a flag.
  const bool after_dashes = extras.size() > 1 && extras.front() == "--";
  if (after_dashes) extras.erase(extras.begin());
  if (extras.empty()) return "unexpected argument";
  const std::string& extra = extras.front();
  const bool flag =
      !after_dashes && absl::StartsWith(extra, "-") && extra != "-";
  const bool takes_commands =
      !app.get_subcommands([](const CLI::App*) { return true; }).empty();
  const std::vector<CLI::App*> commands = app.get_subcommands();
  if (takes_commands && commands.empty() && !flag) {
    return absl::StrCat("unknown command \"", extra, "\"");
  }
  const std::string where =
      commands.empty() ? ""
                       : absl::StrCat(" for ", commands.front()->get_name());
  // The name only: the value of --name=VALUE may be a secret.
  if (flag) {
    return absl::StrCat("unknown flag ", extra.substr(0, extra.find('=')),
                        where);
  }
  return absl::StrCat("unexpected argument \"", extra, "\"", where);
}

// argv[1..argc) as CLI11's parse wants it (last first), with each "--flag="
// split into "--flag" and "" (see ParseCommandLine).
std::vector<std::string> SplitEmptyValues(int argc, const char* const* argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (absl::StartsWith(arg, "--") && arg.size() > 3 && arg.back() == '=' &&
        arg.find('=') == arg.size() - 1) {
      args.push_back(arg.substr(0, arg.size() - 1));
      args.emplace_back();
    } else {
      args.push_back(arg);
    }
  }
  std::reverse(args.begin(), args.end());  // CLI11 reads from the back
  return args;
}

}  // namespace

void ConfigureApp(CLI::App& app, std::string help_text) {
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.require_subcommand(0, 1);
  app.formatter(Verbatim(std::move(help_text)));
}

CLI::App* AddCommand(CLI::App& app, const std::string& name,
                     std::string help_text) {
  CLI::App* command = app.add_subcommand(name);
  command->fallthrough();  // its flags are the app's
  command->formatter(Verbatim(std::move(help_text)));
  return command;
}

CLI::Option* AddCheckedOption(
    CLI::App* app, const std::string& name,
    std::function<absl::Status(const std::string&)> parse) {
  return app->add_option_function<std::string>(
      name, [parse = std::move(parse)](const std::string& value) {
        if (absl::Status status = parse(value); !status.ok()) {
          throw CLI::ValidationError(std::string(status.message()));
        }
      });
}

void AddClientTlsFlags(CLI::App& app, const std::string& env_prefix,
                       const ClientTlsFlagValues& values) {
  app.add_option("--tls-ca", *values.ca_file)->envname(env_prefix + "_TLS_CA");
  app.add_option("--tls-cert", *values.cert_file)
      ->envname(env_prefix + "_TLS_CERT");
  app.add_option("--tls-key", *values.key_file)
      ->envname(env_prefix + "_TLS_KEY");
  app.add_option("--tls-server-name", *values.server_name)
      ->envname(env_prefix + "_TLS_SERVER_NAME");
}

std::string CommandFlags::Check(const CLI::App* command) const {
  for (const auto& [flag, commands] : flags_) {
    if (flag->count() == 0) continue;
    if (std::find(commands.begin(), commands.end(), command) !=
        commands.end()) {
      continue;
    }
    return absl::StrCat("unknown flag ", flag->get_name(), " for ",
                        command->get_name());
  }
  return "";
}

CommandLine ParseCommandLine(CLI::App& app, const CommandFlags& flags, int argc,
                             const char* const* argv) {
  std::vector<std::string> args = SplitEmptyValues(argc, argv);
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    return {CommandLine::Outcome::kHelp, app.help()};
  } catch (const CLI::ExtrasError&) {
    return {CommandLine::Outcome::kUsageError, DescribeExtra(app)};
  } catch (const CLI::ArgumentMismatch& e) {
    // CLI11 says "--target: 1 required TEXT missing". The flag first, as
    // every other usage error puts the thing it names first.
    const std::string what = e.what();
    return {CommandLine::Outcome::kUsageError,
            absl::StrCat(what.substr(0, what.find(':')), " needs a value")};
  } catch (const CLI::ParseError& e) {
    return {CommandLine::Outcome::kUsageError, e.what()};
  }
  const std::vector<CLI::App*> commands = app.get_subcommands();
  if (!commands.empty()) {
    if (std::string stray = flags.Check(commands.front()); !stray.empty()) {
      return {CommandLine::Outcome::kUsageError, std::move(stray)};
    }
  }
  return {CommandLine::Outcome::kRun, ""};
}

}  // namespace sluice::base

// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TOOLS_SLUICECTL_STATE_VIEW_H_
#define SLUICE_TOOLS_SLUICECTL_STATE_VIEW_H_

// What `sluicectl state` and `sluicectl watch` print for people (the JSON
// forms are the messages themselves, see MessageJson).

#include <string>
#include <vector>

#include "sluice/v1/admin.pb.h"

namespace sluice::ctl {

// `state`: {label, value} rows, for FormatTable.
std::vector<std::vector<std::string>> StateRows(const v1::DependencyState& st);

// `watch`: what one event says, after its kind and dependency, e.g.
// "limit 40 -> 22 (mean latency 48.0ms > 1.5 x baseline 20.0ms ...)".
std::string DescribeEvent(const v1::Event& e);

}  // namespace sluice::ctl

#endif  // SLUICE_TOOLS_SLUICECTL_STATE_VIEW_H_

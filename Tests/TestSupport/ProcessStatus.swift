import Foundation
import Glibc

/// One field of `/proc/<process>/status` (`process` is a PID, or `self`), such as `Threads` or
/// `SigIgn`, without its name; nil when the process or the field does not exist.
public func processStatusField(_ name: String, process: String = "self") -> String? {
    guard let text = try? String(contentsOfFile: "/proc/\(process)/status", encoding: .utf8) else { return nil }
    let line = text.split(separator: "\n").first { $0.hasPrefix("\(name):") }
    return line.map { $0.dropFirst(name.count + 1).trimmingCharacters(in: .whitespaces) }
}

/// How many threads this process has now.
public func threadCount() -> Int? {
    processStatusField("Threads").flatMap { Int($0) }
}

/// Whether the process `pid` ignores `signal` (its `SigIgn` mask has the signal's bit set); nil
/// once the process is gone.
public func ignoresSignal(_ signal: Int32, pid: pid_t) -> Bool? {
    guard let field = processStatusField("SigIgn", process: "\(pid)"), let mask = UInt64(field, radix: 16) else {
        return nil
    }
    return mask & (1 << UInt64(signal - 1)) != 0
}

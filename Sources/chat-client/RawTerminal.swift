import Glibc

/// The controlling terminal on stdin/stdout, switched to raw mode for the line editor and
/// back again.
///
/// Raw mode turns off the terminal's own line editing, echo and signal keys (Ctrl-C arrives
/// as a byte, to clear the line) and asks for bracketed paste, so pasted text is marked and
/// never taken for typed keys. The client draws on the alternate screen, so its redraws never
/// pile up in the terminal's scrollback, and the shell's screen comes back as it was. `restore` puts back exactly the modes it found and discards
/// input nobody read, so nothing typed or pasted into the client ever reaches the shell.
@MainActor
final class RawTerminal {
    private var saved: termios?

    /// Switches to raw mode; does nothing when stdin is not a terminal.
    func enter() {
        var modes = termios()
        guard saved == nil, tcgetattr(STDIN_FILENO, &modes) == 0 else { return }
        saved = modes
        modes.c_iflag &= ~tcflag_t(BRKINT | ICRNL | INPCK | ISTRIP | IXON)
        modes.c_cflag |= tcflag_t(CS8)
        modes.c_lflag &= ~tcflag_t(ECHO | ICANON | IEXTEN | ISIG)
        withUnsafeMutableBytes(of: &modes.c_cc) { cc in
            cc[Int(VMIN)] = 1
            cc[Int(VTIME)] = 0
        }
        _ = tcsetattr(STDIN_FILENO, TCSANOW, &modes)
        StandardOutput.write(Self.alternateScreenOn + Self.bracketedPasteOn)
    }

    /// Restores the modes `enter` found, discarding unread input; safe to call more than once.
    func restore() {
        guard var modes = saved else { return }
        saved = nil
        StandardOutput.write(Self.bracketedPasteOff + Self.alternateScreenOff)
        _ = tcsetattr(STDIN_FILENO, TCSAFLUSH, &modes)
    }

    /// The terminal's size in cells, or 80×24 when it cannot be read.
    static func size() -> (columns: Int, rows: Int) {
        var size = winsize()
        guard ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0, size.ws_row > 0 else { return (80, 24) }
        return (Int(size.ws_col), Int(size.ws_row))
    }

    private static let bracketedPasteOn = "\u{1B}[?2004h"
    private static let bracketedPasteOff = "\u{1B}[?2004l"
    private static let alternateScreenOn = "\u{1B}[?1049h"
    private static let alternateScreenOff = "\u{1B}[?1049l"
}

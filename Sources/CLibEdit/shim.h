// libedit's readline-compatible interface: line editing, history and completion for chat-client.
#include <stdio.h>
#include <editline/readline.h>

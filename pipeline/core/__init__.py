"""The pure decision core: extract -> resolve -> gate. No I/O, no Faust."""

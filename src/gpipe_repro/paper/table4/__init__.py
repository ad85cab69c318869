"""Table 4 (GPipe §4): transfer learning — fine-tuned against trained from scratch, same budget."""

module fairq.local/quickstart

go 1.19

require fairq.local/fairq v0.0.0

replace fairq.local/fairq => ../

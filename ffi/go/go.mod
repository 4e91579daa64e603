module fairq.local/fairq

go 1.19
